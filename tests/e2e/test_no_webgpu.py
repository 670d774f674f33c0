"""Chromium as it starts without --enable-unsafe-webgpu on this headless machine: navigator.gpu is
there but offers no adapter. Auto picks WebAssembly and says why; WebGPU picked by hand is refused
with the reason. Its own module: it launches its own browser (one Playwright instance per thread)."""
from __future__ import annotations

import shutil

import pytest

from e2e.page_actions import open_playground, screenshot, watched
from support.wasm_support import CHROMIUM_ARGS


@pytest.fixture
def browser_without_webgpu():
    """Chromium as it starts without --enable-unsafe-webgpu on this headless machine: navigator.gpu is
    there, but it offers no adapter."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def test_auto_picks_webassembly_without_webgpu(server_url, browser_without_webgpu):
    page = watched(browser_without_webgpu.new_page())
    open_playground(page, server_url)
    features = page.locator("#features").inner_text()
    choice = page.locator("#backend-choice").inner_text()
    print(f"\n{features}\n{choice}")
    assert "No WebGPU" in features
    assert choice.startswith("Auto chose WebAssembly") and "adapter" in choice
    page.select_option("#preset", "tiny")
    page.fill("#steps", "5")
    page.click("#start")
    page.wait_for_function("/^(Finished|Error)/.test(document.getElementById('status').textContent)")
    assert page.locator("#status").inner_text().startswith("Finished")
    page.select_option("#backend", "webgpu")
    page.click("#start")
    assert "WebGPU cannot run here" in page.locator("#train-errors").inner_text()
    screenshot(page, "backends_no_webgpu")
