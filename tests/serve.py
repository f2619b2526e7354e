"""Run a gRPC function server in a subprocess on a free loopback port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def serving(module_args: Sequence[str], timeout: float = 30.0) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start ``python -m <module_args> --address 127.0.0.1:<port>``; yield (target, process) once it accepts."""
    port = free_port()
    target = f"127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", *module_args, "--address", target],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"server exited with {proc.returncode}: {proc.stderr.read().decode() if proc.stderr else ''}"
                )
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"server on {target} did not start within {timeout}s")
            time.sleep(0.05)
        yield target, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
