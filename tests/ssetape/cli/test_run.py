"""`ssetape run -- CMD`: an unchanged app, over HTTPS, recorded; its exit code and signals."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ssetape.cli.run import CA_VARS, PROXY_VARS
from ssetape.simulator.simulator import Simulator
from tests.conftest import SSETAPE

pytestmark = pytest.mark.slow

# The app is the user's: its base_url is the API's own, no proxy, no custom HTTP client.
SDK_APP = """
import sys
import openai
client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="sk-test", max_retries=0)
stream = client.chat.completions.create(
    model="sim-chat", stream=True, messages=[{"role": "user", "content": "hello"}]
)
print("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
sys.exit(3)
"""

NODE_APP = """
const res = await fetch(process.argv[2] + "/v1/chat/completions", {
  method: "POST",
  headers: { "content-type": "application/json", authorization: "Bearer sk-test" },
  body: JSON.stringify({
    model: "sim-chat", stream: true, messages: [{ role: "user", content: "hi" }],
  }),
});
const text = await res.text();
let out = "";
for (const line of text.split("\\n")) {
  if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
  for (const c of JSON.parse(line.slice(6)).choices) out += c.delta.content || "";
}
console.log(out);
process.exit(4);
"""

# Waits for a signal. SIGTERM: says so and exits 40 + its number; SIGINT: dies of it, as a
# C program would (Python's own exit on KeyboardInterrupt is the same, in more lines).
WAITING_APP = """
import signal, sys, time
def got(sig, frame):
    print("got", signal.Signals(sig).name, flush=True)
    sys.exit(40 + sig)
signal.signal(signal.SIGTERM, got)
signal.signal(signal.SIGINT, signal.SIG_DFL)
print("waiting", flush=True)
time.sleep(60)
"""


def user_env() -> dict[str, str]:
    """The test process's environment without what `ssetape run` sets or honours: a
    NO_PROXY of the machine's would send loopback around the proxy."""
    gone = {*PROXY_VARS, *CA_VARS, "NO_PROXY", "no_proxy", "NODE_OPTIONS"}
    return {k: v for k, v in os.environ.items() if k not in gone}


def ssetape_run(
    tmp_path: Path, confdir: Path, *args: str, upstream_cert: Path | None = None
) -> subprocess.CompletedProcess[str]:
    trust = ["--set", f"ssl_verify_upstream_trusted_ca={upstream_cert}"] if upstream_cert else []
    return subprocess.run(
        [SSETAPE, "run", "--db", "tape.db", "--confdir", str(confdir), *trust, "--", *args],
        cwd=tmp_path,
        env=user_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def stored(tmp_path: Path) -> list[dict[str, object]]:
    out = subprocess.run(
        [SSETAPE, "list", "--db", "tape.db", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    rows: list[dict[str, object]] = json.loads(out.stdout)
    return rows


def output_text(tmp_path: Path, exchange_id: object) -> str:
    out = subprocess.run(
        [SSETAPE, "show", str(exchange_id), "--db", "tape.db", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    text: str = json.loads(out.stdout)["output_text"]
    return text


def test_an_unchanged_openai_sdk_app_is_recorded_over_https(
    tls_sim: tuple[Simulator, Path], tmp_path: Path, confdir: Path
) -> None:
    sim, upstream_cert = tls_sim
    (tmp_path / "app.py").write_text(SDK_APP)
    done = ssetape_run(
        tmp_path, confdir, sys.executable, "app.py", sim.url, upstream_cert=upstream_cert
    )
    assert done.returncode == 3, done.stderr
    # Standard output is the app's alone; ssetape speaks on stderr.
    printed = done.stdout.strip()
    assert printed and "\n" not in printed, done.stdout
    (x,) = stored(tmp_path)
    assert x["url"] == f"{sim.url}/v1/chat/completions"  # loopback upstream: recorded too
    assert (x["outcome"], x["model"]) == ("completed", "sim-chat")
    assert output_text(tmp_path, x["id"]) == printed  # what the app got is what is stored
    assert "1 exchange stored, none lost" in done.stderr
    assert "ssetape list --db tape.db" in done.stderr.splitlines()[-1]


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_node_fetch_goes_through_the_proxy(
    tls_sim: tuple[Simulator, Path], tmp_path: Path, confdir: Path
) -> None:
    """Node's global fetch, which reads no proxy variable before Node 22.21/24.5."""
    sim, upstream_cert = tls_sim
    (tmp_path / "app.mjs").write_text(NODE_APP)
    done = ssetape_run(tmp_path, confdir, "node", "app.mjs", sim.url, upstream_cert=upstream_cert)
    assert done.returncode == 4, done.stderr
    (x,) = stored(tmp_path)
    assert x["url"] == f"{sim.url}/v1/chat/completions"
    assert x["outcome"] == "completed"
    assert output_text(tmp_path, x["id"]) == done.stdout.strip() != ""


def test_a_command_that_is_not_found_exits_127_in_one_line(tmp_path: Path, confdir: Path) -> None:
    done = ssetape_run(tmp_path, confdir, "no-such-command-ssetape", "--flag")
    assert done.returncode == 127
    assert done.stderr == "ssetape run: no-such-command-ssetape: command not found\n"
    assert done.stdout == ""
    assert not (tmp_path / "tape.db").exists()  # no recorder was started for nothing


@pytest.mark.parametrize(
    ("sig", "code"),
    [
        (signal.SIGTERM, 40 + signal.SIGTERM),  # the app's own exit code, passed through
        (signal.SIGINT, 128 + signal.SIGINT),  # killed by the signal: as a shell says it
    ],
)
def test_signals_go_to_the_command_and_the_recorder_stops_after_it(
    tmp_path: Path, confdir: Path, sig: signal.Signals, code: int
) -> None:
    (tmp_path / "app.py").write_text(WAITING_APP)
    proc = subprocess.Popen(
        [
            SSETAPE,
            "run",
            "--db",
            "tape.db",
            "--confdir",
            str(confdir),
            "--",
            sys.executable,
            "app.py",
        ],
        cwd=tmp_path,
        env=user_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "waiting\n"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    if sig == signal.SIGTERM:
        assert out == "got SIGTERM\n"
    assert "0 events in 0 exchanges stored, none lost" in err  # the recorder stopped cleanly


# Counts the SIGINTs it gets: blocked and waited for, none is lost to Python's handler
# running once for two signals in quick succession.
COUNTING_APP = """
import signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
print("waiting", flush=True)
seen = [signal.sigwaitinfo({signal.SIGINT})]
while signal.sigtimedwait({signal.SIGINT}, 1.0):  # a second one, had it been sent
    seen.append(1)
print("SIGINT x", len(seen), flush=True)
"""


def test_ctrl_c_at_a_terminal_reaches_the_command_once(tmp_path: Path, confdir: Path) -> None:
    """The terminal signals the whole foreground group, the command too: ssetape run sends
    it no second SIGINT, and the recorder waits for the command to finish."""
    (tmp_path / "app.py").write_text(COUNTING_APP)
    args = ["run", "--db", "tape.db", "--confdir", str(confdir), "--", sys.executable, "app.py"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own whose terminal is the pty
        try:
            os.chdir(tmp_path)
            os.execve(SSETAPE, [SSETAPE, *args], user_env())
        finally:
            os._exit(127)  # never back into pytest
    output = b""
    while b"waiting" not in output:
        output += _read(fd)
    os.write(fd, b"\x03")  # Ctrl-C, as typed
    while chunk := _read(fd):
        output += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    text = output.decode()
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "SIGINT x 1" in text
    assert "0 events in 0 exchanges stored, none lost" in text


def _read(fd: int, timeout: float = 30) -> bytes:
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        raise AssertionError("ssetape run said nothing for 30 s")
    try:
        return os.read(fd, 4096)
    except OSError:  # EIO: every process on the pty has exited
        return b""
