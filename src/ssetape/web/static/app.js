// ssetape web: the page's only script (served by the package; the CSP runs nothing inline).
// Recorded text is only ever written as text (textContent, text nodes); the rows of the live
// list come as HTML the server rendered and escaped.
"use strict";

function followLive(table) {
  const tbody = table.querySelector("tbody");
  const watch = Array.from(tbody.querySelectorAll("tr[data-state=recording]"))
    .map((tr) => tr.dataset.id);
  const sep = table.dataset.live.includes("?") ? "&" : "?";
  const url = `${table.dataset.live}${sep}after=${table.dataset.after}&watch=${watch.join(",")}`;
  const source = new EventSource(url);
  source.addEventListener("exchange", (message) => {
    const row = JSON.parse(message.data);
    const template = document.createElement("template");
    template.innerHTML = row.html;
    const tr = template.content.firstElementChild;
    const old = tbody.querySelector(`tr[data-id="${Number(row.id)}"]`);
    if (old) {
      old.replaceWith(tr);
    } else {
      tr.classList.add("new");
      tbody.prepend(tr);
    }
    const empty = document.getElementById("empty");
    if (empty) empty.remove();
  });
}

function fromHtml(html) {
  // A part of the page the server rendered (every recorded string escaped there).
  const template = document.createElement("template");
  template.innerHTML = html;
  return template.content.firstElementChild;
}

function replacePart(id, html) {
  const old = document.getElementById(id);
  if (old && html) old.replaceWith(fromHtml(html));
}

function followEvents(table) {
  // The last page of a stream in flight follows it to its end: new events are appended as
  // they are stored, the output grows with them, the figures and findings are replaced as
  // they change and the timeline is drawn again; once it is over, the analyzed output and the
  // final figures replace what was grown here. No reload.
  const tbody = table.querySelector("tbody");
  const out = document.getElementById("output");
  const timeline = document.querySelector("#timeline[data-src]");
  const redraw = timeline ? redrawer(timeline) : () => Promise.resolve();
  const url = `${table.dataset.live}&after=${table.dataset.after}&offset=${table.dataset.offset}`;
  const source = new EventSource(url);
  source.addEventListener("output", (message) => {
    if (out) out.textContent = JSON.parse(message.data).text;
  });
  let last = Number(table.dataset.after);
  source.addEventListener("event", (message) => {
    const row = JSON.parse(message.data);
    // By seq, not by row: a reconnected stream sends again rows this page let go.
    if (Number(row.seq) <= last) return;
    last = Number(row.seq);
    tbody.append(fromHtml(row.html));
    keepLast(table, tbody);
    if (out && row.text) out.appendChild(document.createTextNode(row.text));
  });
  source.addEventListener("exchange", (message) => {
    const x = JSON.parse(message.data);
    replacePart("facts", x.facts);
    replacePart("findings", x.findings);
    replacePart("response", x.response);
    if (out && typeof x.output === "string") out.textContent = x.output;
    const rows = tbody.rows.length;
    const first = rows ? tbody.rows[0].id.replace("event-", "") : "";
    const count = document.getElementById("events-count");
    if (count) {
      count.textContent = `${rows.toLocaleString("en")} of ${Number(x.count).toLocaleString("en")}`
        + ` events${first ? ` from seq ${first}` : ""}`;
    }
    table.dataset.state = x.state;
    if (x.state === "recording") redraw(false);
  });
  source.addEventListener("done", () => {
    source.close();
    // The timeline of the whole stream, then the page says it is over.
    redraw(true).then(() => {
      table.dataset.state = "done";
    });
  });
}

function keepLast(table, tbody) {
  // The table keeps its last data-keep rows (a page of events): a stream followed for hours
  // would grow it, and the browser's memory, without bound. The output text needs no such
  // care: the server stops sending it at the page's cut.
  const keep = Number(table.dataset.keep) || 0;
  if (!keep || tbody.rows.length <= keep) return;
  let dropped = 0;
  while (tbody.rows.length > keep) {
    tbody.rows[0].remove();
    dropped += 1;
  }
  let note = document.getElementById("events-earlier");
  if (!note) {
    note = document.createElement("p");
    note.id = "events-earlier";
    note.dataset.count = "0";
    table.before(note);
  }
  const n = Number(note.dataset.count) + dropped;
  note.dataset.count = String(n);
  const link = document.createElement("a");
  link.href = "?#events";
  link.textContent = "the event pages have them";
  note.replaceChildren(`… ${n.toLocaleString("en")} earlier events left this table: `, link);
}

function redrawer(box) {
  // One drawing at a time, at most every few seconds while the stream goes on (each reads
  // every event); the last one, once it is over, waits for any drawing under way.
  let running = Promise.resolve();
  let last = 0;
  return (final) => {
    const now = performance.now();
    if (!final && (box.dataset.state === "loading" || now - last < 3000)) return running;
    last = now;
    running = running.then(() => loadTimeline(box, Number(box.dataset.zoom) || 1));
    return running;
  };
}

function play(button) {
  const out = document.getElementById("play-out");
  const state = document.getElementById("play-state");
  const speed = Number(document.getElementById("speed").value) || 1;
  button.disabled = true;
  out.textContent = "";
  state.textContent = "loading…";
  fetch(button.dataset.src)
    .then((r) => r.json())
    .then((answer) => {
      const pieces = answer.pieces;
      const start = performance.now();
      let i = 0;
      state.textContent = `playing at ${speed}x`;
      out.dataset.state = "playing";
      const step = () => {
        // Offsets are microseconds since the request was sent: the page keeps that pace.
        const now = (performance.now() - start) * 1000 * speed;
        while (i < pieces.length && pieces[i][0] <= now) {
          out.appendChild(document.createTextNode(pieces[i][1]));
          i += 1;
        }
        if (i < pieces.length) {
          setTimeout(step, Math.max(0, (pieces[i][0] - now) / 1000 / speed));
        } else {
          out.normalize();
          out.dataset.state = "done";
          state.textContent = answer.cut ? "done (cut: the text is longer)" : "done";
          button.disabled = false;
        }
      };
      step();
    })
    .catch((err) => {
      state.textContent = `cannot play: ${err}`;
      button.disabled = false;
    });
}

function clickableMarks(svg) {
  // A mark's tooltip reads "#SEQ type at OFFSET": a click goes to that event's row.
  svg.addEventListener("click", (e) => {
    const mark = e.target.closest(".mark");
    const title = mark && mark.querySelector("title");
    const m = title && /^#(\d+)/.exec(title.textContent);
    if (!m) return;
    const row = document.getElementById(`event-${m[1]}`);
    if (row) location.hash = `event-${m[1]}`;
  });
}

function loadTimeline(box, zoom = 1) {
  // The SVG comes from the server, every recorded string in it escaped there. Zoomed, the
  // server draws it wider; the box scrolls sideways and keeps the same moment in its middle.
  const middle = box.scrollWidth ? (box.scrollLeft + box.clientWidth / 2) / box.scrollWidth : 0;
  box.dataset.state = "loading";
  return fetch(`${box.dataset.src}?zoom=${Number(zoom)}`)
    .then((r) => (r.ok ? r.text() : Promise.reject(new Error(r.statusText))))
    .then((svg) => {
      box.innerHTML = svg;
      box.scrollLeft = Math.max(0, middle * box.scrollWidth - box.clientWidth / 2);
      box.dataset.zoom = String(zoom);
      box.dataset.state = "loaded";
      clickableMarks(box.querySelector("svg"));
    })
    .catch((err) => {
      box.textContent = `cannot load the timeline: ${err}`;
    });
}

function zoomButtons(box) {
  const buttons = document.querySelectorAll("#zoom button[data-zoom]");
  buttons.forEach((button) => {
    button.addEventListener("click", () => {
      buttons.forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
      loadTimeline(box, Number(button.dataset.zoom) || 1);
    });
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const table = document.querySelector("table.exchanges[data-live]");
  if (table && window.EventSource) followLive(table);
  const button = document.getElementById("play");
  if (button) button.addEventListener("click", () => play(button));
  const events = document.querySelector("table.events[data-live]");
  if (events && window.EventSource) followEvents(events);
  const timeline = document.querySelector("#timeline[data-src]");
  if (timeline) {
    loadTimeline(timeline);
    zoomButtons(timeline);
  }
});
