"""`ssetape run` passes SIGINT/SIGTERM to its command, whichever of its threads the kernel
hands the signal to, and one that comes while the command is starting is not lost."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from ssetape.cli.run import _Signals

# Says it waits, then exits 40 + the signal's number on SIGTERM.
APP = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(40 + sig))
print("waiting", flush=True)
time.sleep(60)
"""
SIGTERM_CODE = 40 + signal.SIGTERM


@pytest.fixture
def command() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", APP], stdout=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline() == b"waiting\n"
    # Were the signal never passed on, the command would sleep on: end it so the test fails.
    guard = threading.Timer(15, child.kill)
    guard.start()
    yield child
    guard.cancel()
    child.kill()
    child.wait()


@pytest.fixture
def signals() -> Iterator[_Signals]:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")
    handlers = _Signals()
    yield handlers
    handlers.restore()


def test_a_signal_handed_to_another_thread_reaches_the_command(
    command: subprocess.Popen[bytes], signals: _Signals
) -> None:
    signals.adopt(command)
    # The kernel may deliver a process's signal to any of its threads, here the proxy's.
    other = threading.Thread(
        target=lambda: signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    )
    other.start()
    other.join()
    assert signals.wait(command) == SIGTERM_CODE
    assert signals.received == signal.SIGTERM


def test_a_signal_that_came_while_the_command_started_reaches_it(
    command: subprocess.Popen[bytes], signals: _Signals
) -> None:
    signal.raise_signal(signal.SIGTERM)  # after `run` looked for one, before it adopted the command
    signals.adopt(command)
    assert signals.wait(command) == SIGTERM_CODE
