"""Runs the real playground server (`python -m server serve`) as a child process on a free port,
for tests/test_server.py and the Playwright tests in e2e/."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from server.app import SITE
from server.cli import missing_builds

ROOT = Path(__file__).resolve().parent.parent


def require_site_builds():
    """Fails the test unless `make build` has put every WebAssembly build where the page loads it."""
    if missing := missing_builds(SITE):
        pytest.fail(f"WebAssembly builds {', '.join(missing)} are missing from site/static/wasm: run `make build`")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(args: list[str] | None = None, ready_path: str = "/", cwd: Path = ROOT, env: dict | None = None):
    """Yields the base URL of a fresh `python -m server serve` (or of `args`, a command that serves
    on the port it is given as {port}, run in `cwd` with `env`); stops it afterwards."""
    port = free_port()
    cmd = [a.format(port=port) for a in args] if args else [
        sys.executable, "-m", "server", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env or dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + ready_path, timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {' '.join(cmd)}\n{proc.stdout.read()}")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
