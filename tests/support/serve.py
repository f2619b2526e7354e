"""The function as a real process: a gRPC server on a free loopback port, or one CLI command.

``Invoke`` is the type of the ``invoke`` fixture: the same command run in process.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from click.testing import Result

from tests.support.repo import REPO

Invoke = Callable[..., Result]
"""``invoke(*args)``: the ``function`` command run in process; click's Result (exit_code, stdout, stderr)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(proc: subprocess.Popen[bytes], target: str, timeout: float = 30.0) -> None:
    """Return once ``target`` accepts connections; fail if the server exits first."""
    host, port = target.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"server exited with {proc.returncode}: {err}")
        with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=0.2):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"server on {target} did not start within {timeout}s")
        time.sleep(0.05)


@contextlib.contextmanager
def serving(
    module_args: Sequence[str],
    timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
    *,
    log: Path | None = None,
    port: int | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start ``python -m <module_args> --address 127.0.0.1:<port>``; yield (target, process) once it accepts.

    The server's log (stdout) goes to ``log`` when given (a file: a pipe nobody
    reads would fill up and stall the server); ``port`` defaults to a free one.
    """
    target = f"127.0.0.1:{port or free_port()}"
    with contextlib.ExitStack() as files:
        stdout = files.enter_context(log.open("wb")) if log is not None else subprocess.DEVNULL
        proc = subprocess.Popen(
            [sys.executable, "-m", *module_args, "--address", target],
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stdout=stdout,
            stderr=subprocess.PIPE,
        )
    try:
        wait_for_port(proc, target, timeout)
        yield target, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The function's CLI in a subprocess, as a user runs it; a hang fails after a minute.

    For what only the real process shows (exit codes of serving, log lines);
    everything else runs in process through the ``invoke`` fixture.
    """
    return subprocess.run(
        [sys.executable, "-m", "function.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
