"""Runs the real playground server (`tinygpt serve`) as a child process on a free port,
for tests/server/test_server.py and the Playwright tests in tests/e2e/."""
from __future__ import annotations

import pytest

from bench.hosts import running_server  # noqa: F401  (the tests start the server as the benchmarks do)
from server.app import SITE
from server.cli import missing_builds


def require_site_builds():
    """Fails the test unless `make build` has put every WebAssembly build where the page loads it."""
    if missing := missing_builds(SITE):
        pytest.fail(f"WebAssembly builds {', '.join(missing)} are missing from site/static/wasm: run `make build`")
