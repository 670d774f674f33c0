"""Playwright fixtures: the real server process and Debian's headless Chromium (never a
playwright-downloaded browser), with WebGPU exposed (SwiftShader: correctness only)."""
from __future__ import annotations

import shutil

import pytest

from e2e.page_actions import PAGE_WAIT_MS
from support.server_process import require_site_builds, running_server
from support.wasm_support import CHROMIUM_ARGS


@pytest.fixture(scope="session")
def server_url():
    require_site_builds()
    with running_server() as url:
        yield url


# Per module, not per session: Playwright's sync API allows one running instance per thread, and
# the browser tests under tests/ start their own.
@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (make setup)")
    exe = shutil.which("chromium")
    if not exe:
        pytest.fail("chromium is not installed (make setup installs the Debian package)")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=[*CHROMIUM_ARGS, "--enable-unsafe-webgpu"], headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context()
    p = context.new_page()
    p.errors = []
    p.on("pageerror", lambda e: p.errors.append(str(e)))
    p.set_default_timeout(PAGE_WAIT_MS)
    try:
        yield p
    finally:
        context.close()
