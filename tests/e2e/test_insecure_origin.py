"""The playground opened by a name that is not localhost over plain http (as `make serve HOST=0.0.0.0`
is from another machine of a LAN): not a secure context, so no OPFS, no WebGPU, no crypto.subtle and
no threads. The page says so, trains with the single-threaded build, keeps the model in memory and
offers the download. Its own module: it launches its own browser (one Playwright instance per thread)."""
from __future__ import annotations

import re
import shutil

import pytest

from e2e.page_actions import PAGE_WAIT_MS, open_playground, screenshot, train, watched
from python_ref import tinygpt_file
from support.wasm_support import CHROMIUM_ARGS

NAME = "playground.test"


@pytest.fixture
def insecure_page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=shutil.which("chromium"), headless=True,
                               args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {NAME} 127.0.0.1"])
        try:
            page = watched(b.new_page())
            page.errors = []
            page.on("pageerror", lambda e: page.errors.append(str(e)))
            page.set_default_timeout(PAGE_WAIT_MS)
            yield page
        finally:
            b.close()


def test_without_a_secure_context_it_trains_in_memory_and_offers_the_download(server_url, insecure_page, tmp_path):
    page = insecure_page
    open_playground(page, server_url.replace("127.0.0.1", NAME))
    assert page.evaluate("isSecureContext") is False
    page.wait_for_function("document.getElementById('opfs-note').textContent !== ''")
    features = page.locator("#features").inner_text()
    note = page.locator("#opfs-note").inner_text()
    print(f"\n{features}\n{note}")
    assert "No OPFS: OPFS needs a secure context: this page is not a secure context" in features
    assert "No WebGPU: WebGPU needs a secure context" in features
    assert "No WebAssembly threads: not a secure context (open the page over https, or as http://localhost)" in features
    assert note.startswith("Checkpoints cannot be kept here") and "download it to keep it" in note
    page.wait_for_function("document.getElementById('preset-limits').textContent !== ''")
    limits = page.locator("#preset-limits").inner_text()
    print(limits)
    assert page.locator("#preset option[value=behemoth]").is_disabled()
    # the need is the C++ core's arena for behemoth (about 8 GiB), whatever its exact layout
    assert re.match(r"Disabled here: behemoth \(WebAssembly: needs 8\.\d\d GiB; WebAssembly can address 4\.00 GiB "
                    r"here \(the Memory64 build needs threads: not a secure context", limits)
    text = train(page, "tiny", 20, seed=8)
    print(text)
    assert text.startswith("Finished: step 20/20")
    assert page.locator("#checkpoints tbody tr").count() == 0
    with page.expect_download() as d:
        page.click("#download")
    path = tmp_path / "in-memory.tinygpt"
    d.value.save_as(path)
    state = tinygpt_file.read_state(path)
    print(f"downloaded step {state.step}, corpus sha256 {state.header['corpus']['sha256'][:16]}...")
    assert state.step == 20 and state.m is not None
    page.click("#start")
    page.wait_for_selector("#continue-dialog[open]")
    assert "only if you download it" in page.locator("#continue-text").inner_text()
    page.click("#continue-dialog button[value=cancel]")
    screenshot(page, "insecure_origin_in_memory")
    assert page.errors == []
