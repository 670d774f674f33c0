"""Playwright fixtures: the real server process and Debian's headless Chromium (never a
playwright-downloaded browser), with WebGPU exposed (SwiftShader: correctness only)."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from server_process import running_server  # noqa: E402
from wasm_support import CHROMIUM_ARGS  # noqa: E402


@pytest.fixture(scope="session")
def server_url():
    if not (ROOT / "site/static/wasm/relaxed/tinygpt.wasm").exists():
        pytest.fail("the WebAssembly builds are missing from site/static/wasm: run `make build`")
    with running_server() as url:
        yield url


@pytest.fixture(scope="session")
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
    p.set_default_timeout(120_000)
    try:
        yield p
    finally:
        context.close()
