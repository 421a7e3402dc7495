// Preloaded by `ssetape run` (NODE_OPTIONS=--require): Node's own fetch() through HTTPS_PROXY.
//
// Node's fetch (its bundled undici) ignores HTTPS_PROXY unless NODE_USE_ENV_PROXY=1 is
// honoured (Node 22.21 / 24.5 and later), and older Node exposes no proxy agent without the
// `undici` package. The bundled undici does keep its global dispatcher under a well-known
// symbol, and its Agent takes a `connect` function: this file gives fetch an Agent whose
// connections are CONNECT tunnels through the proxy, with Node's built-ins only. Where Node
// already proxies fetch itself (its dispatcher is not a plain Agent), nothing is changed.
// Node's http/https modules are not covered.
"use strict";

const net = require("node:net");
const tls = require("node:tls");

const DISPATCHER = Symbol.for("undici.globalDispatcher.1");

function env(name) {
  return process.env[name.toLowerCase()] || process.env[name.toUpperCase()] || "";
}

function bypassed(host, port) {
  // NO_PROXY as curl reads it: "*", a host, ".domain" or "domain" (with its subdomains).
  for (let entry of env("no_proxy").split(",")) {
    entry = entry.trim().toLowerCase();
    if (!entry) continue;
    if (entry === "*") return true;
    const [name, only] = entry.startsWith("[") ? [entry, ""] : entry.split(":");
    if (only && only !== String(port)) continue;
    const bare = name.replace(/^\*?\./, "");
    if (host === bare || host.endsWith("." + bare)) return true;
  }
  return false;
}

function tunnel(proxy, opts, callback) {
  const https = opts.protocol === "https:";
  const port = Number(opts.port) || (https ? 443 : 80);
  const target = `${opts.hostname.includes(":") ? `[${opts.hostname}]` : opts.hostname}:${port}`;
  const socket = net.connect(Number(proxy.port) || 80, proxy.hostname);
  let done = false;
  const finish = (err, sock) => {
    if (done) return;
    done = true;
    if (err) socket.destroy();
    callback(err, sock);
  };
  socket.once("error", (err) => finish(err));
  socket.once("connect", () => {
    socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
  });
  let head = Buffer.alloc(0);
  const onData = (chunk) => {
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf("\r\n\r\n");
    if (end < 0) return;
    socket.removeListener("data", onData);
    const status = head.subarray(0, head.indexOf("\r\n")).toString("latin1");
    if (!/^HTTP\/1\.[01] 2\d\d/.test(status)) {
      finish(new Error(`proxy ${proxy.host} refused CONNECT ${target}: ${status}`));
      return;
    }
    if (head.length > end + 4) socket.unshift(head.subarray(end + 4));
    if (!https) {
      finish(null, socket);
      return;
    }
    const secure = tls.connect({
      socket,
      host: opts.hostname, // what the certificate is checked against
      servername: net.isIP(opts.hostname) ? undefined : opts.servername || opts.hostname,
      ALPNProtocols: ["http/1.1"],
    });
    secure.once("error", (err) => finish(err));
    secure.once("secureConnect", () => finish(null, secure));
  };
  socket.on("data", onData);
}

function install() {
  void globalThis.Headers; // loads the bundled undici, which sets its global dispatcher
  const current = globalThis[DISPATCHER];
  if (!current || current.constructor.name !== "Agent") return;
  const Agent = current.constructor;
  const proxied = new Agent({
    connect(opts, callback) {
      const url = env(opts.protocol === "https:" ? "https_proxy" : "http_proxy");
      if (!url || bypassed(opts.hostname.toLowerCase(), opts.port)) {
        // Not through the proxy: a plain connection as Node would make it.
        const plain = opts.protocol === "https:"
          ? tls.connect({
            host: opts.hostname,
            port: Number(opts.port) || 443,
            servername: net.isIP(opts.hostname) ? undefined : opts.servername || opts.hostname,
            ALPNProtocols: ["http/1.1"],
          })
          : net.connect(Number(opts.port) || 80, opts.hostname);
        const ready = opts.protocol === "https:" ? "secureConnect" : "connect";
        plain.once("error", (err) => callback(err));
        plain.once(ready, () => callback(null, plain));
        return;
      }
      tunnel(new URL(url), opts, callback);
    },
  });
  globalThis[DISPATCHER] = proxied;
}

if (typeof globalThis.fetch === "function") install();
