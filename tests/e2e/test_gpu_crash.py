"""The GPU process dies while WebGPU trains (DevTools' Browser.crashGpuProcess: a real crash, as a driver
reset would cause): the page says what happened, keeps the last checkpoint, and that checkpoint
resumes on WebAssembly."""
from __future__ import annotations

from e2e.page_actions import open_playground, screenshot


def test_a_lost_gpu_stops_training_and_the_checkpoint_resumes(server_url, page):
    open_playground(page, server_url)
    page.select_option("#preset", "tiny")
    page.select_option("#backend", "webgpu")
    page.fill("#steps", "1000")
    page.fill("#checkpoint-seconds", "1")
    page.click("#start")
    page.wait_for_function("window.playground.lastSaved?.step >= 1")
    saved = page.evaluate("window.playground.lastSaved")
    page.context.browser.new_browser_cdp_session().send("Browser.crashGpuProcess")
    page.wait_for_function("document.getElementById('status').classList.contains('error')", timeout=60_000)
    message = page.locator("#status").inner_text()
    print(f"\n{message}")
    assert (message.startswith("Error: the WebGPU device was lost")
            and message.endswith("the last checkpoint is kept. Resume it from Saved models."))
    page.wait_for_function("!document.getElementById('start').disabled")
    assert page.evaluate("window.playground.loaded") is None
    row = page.locator(f"#checkpoints tbody tr[data-id='{saved['id']}']")
    page.select_option("#backend", "wasm")
    row.locator("button[name=resume]").click()
    page.wait_for_function(f"window.playground.loaded?.id === '{saved['id']}' && "
                           "window.playground.loaded.backend === 'wasm'")
    resumed = page.evaluate("window.playground.loaded.step")
    print(f"saved at step {saved['step']} on WebGPU; resumed on WebAssembly at step {resumed}")
    assert resumed >= saved["step"]
    page.wait_for_function(f"window.playground.losses.length > {resumed + 5}")
    page.click("#stop")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('Stopped')")
    screenshot(page, "gpu_crash_resumed_on_wasm")
