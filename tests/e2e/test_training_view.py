"""Training, seen (issue 60): a person turns the training view on, trains, and watches small multiples under the loss
chart update every K steps: each layer's gradient norm and update-to-weight ratio, each head's attention entropy,
from both engines; the figures the page draws are those the worker measured, and their summary is in words."""
from __future__ import annotations

import re

from e2e.page_actions import fill_training, open_playground, press_train, screenshot
from e2e.test_accessibility import AXE, axe, report

TINY_LAYERS = 2
TINY_HEADS = 3


def turn_on(page, every: int) -> None:
    page.check("#stats-on")
    page.fill("#stats-every", str(every))
    page.locator("#stats-every").dispatch_event("change")
    page.wait_for_function("!document.getElementById('stats-panels').hidden")


def measured(page) -> list:
    return page.evaluate("window.playground.stats ?? []")


def test_training_view_updates_while_training_on_webassembly(server_url, page):
    open_playground(page, server_url)
    turn_on(page, 10)
    assert page.locator("#stats-panels").is_visible()
    fill_training(page, "tiny", 300, backend="wasm", seed=3)
    ended = page.evaluate("window.playground.runsEnded")
    press_train(page)
    # while the run goes: the panels fill in step by step
    page.wait_for_function("(window.playground.stats?.length ?? 0) >= 3")
    early = measured(page)
    running = page.evaluate("window.playground.runsEnded")
    early_summary = page.locator("#stats-summary").inner_text()
    page.wait_for_function(f"window.playground.runsEnded > {ended}")
    stats = measured(page)
    # the summary is rewritten at most once a second (a screen reader is not talked at without pause)
    page.wait_for_function("document.getElementById('stats-summary').textContent.includes('at step 300:')")
    summary = page.locator("#stats-summary").inner_text()
    note = page.locator("#stats-note").inner_text()
    print(f"\nwhile training (runs ended {running - ended}): {len(early)} measured, {early_summary}\n"
          f"after 300 steps: {len(stats)} measured; {note}\n{summary}")
    assert running == ended, "the first measurements came while the run was still going"
    assert [s["step"] for s in stats] == list(range(10, 301, 10))
    last = stats[-1]
    assert last["groups"] == ["embeddings", "block 0", "block 1", "final LayerNorm"]
    assert len(last["entropy"]) == TINY_LAYERS and all(len(row) == TINY_HEADS for row in last["entropy"])
    assert all(0 <= h <= last["maxEntropy"] + 1e-9 for row in last["entropy"] for h in row)
    assert all(1e-5 < r < 1 for r in last["updateRatio"]) and all(g > 0 for g in last["gradNorm"])
    assert last["probeBytes"] == 32 and last["backend"] == "wasm" and not last["adapters"]
    # training sharpens attention: the entropy falls from uniform as the run goes
    assert min(min(row) for row in last["entropy"]) < min(min(row) for row in stats[0]["entropy"])
    assert summary.startswith("Training view at step 300: gradient norm per layer embeddings ")
    # two panels for the layers' norms and ratios, one per layer for the heads' entropy; a legend of the layers
    assert page.locator("#stats-panels canvas").count() == 2 + TINY_LAYERS
    assert page.locator("#stats-legend li").all_inner_texts() == last["groups"]
    for canvas in page.locator("#stats-panels canvas").all():
        assert canvas.get_attribute("role") == "img" and canvas.get_attribute("aria-describedby") == "stats-summary"
    assert re.search(r"measured every 10 steps, on WebAssembly", note)
    page.locator("#stats-panels").scroll_into_view_if_needed()
    screenshot(page, "training_view_wasm")
    blocking = report("training view (light)", axe(page, AXE.read_text()))
    page.emulate_media(color_scheme="dark")  # the dark theme: the charts redraw in its colours
    page.wait_for_timeout(300)
    page.locator("#progress").screenshot(path=str(screenshot(page, "training_view_wasm_dark")))
    blocking += report("training view (dark)", axe(page, AXE.read_text()))
    assert blocking == [], blocking  # axe-core: nothing serious or critical with the view shown
    page.emulate_media(color_scheme="light")

    # a LoRA fine-tune of this model: the view shows its adapters, per block
    before = len(stats)
    page.fill("#lora-steps", "40")
    ended = page.evaluate("window.playground.runsEnded")
    page.click("#finetune-start")
    page.wait_for_function(f"window.playground.runsEnded > {ended}")
    lora = measured(page)[before:]
    page.wait_for_function("document.getElementById('stats-summary').textContent.includes('at step 40:')")
    print(f"LoRA: {page.locator('#stats-note').inner_text()}\n{page.locator('#stats-summary').inner_text()}")
    assert [s["step"] for s in lora] == [10, 20, 30, 40] and all(s["adapters"] for s in lora)
    assert lora[-1]["groups"] == ["block 0", "block 1"] and lora[-1]["id"] != last["id"]
    assert page.locator("#stats-note").inner_text().startswith("Step 40, measured every 10 steps, on WebAssembly: "
                                                               "the adapters' gradient norm per block")
    page.locator("#stats-panels").scroll_into_view_if_needed()
    screenshot(page, "training_view_lora")

    # off: the next run measures nothing; a bad K is refused with a sentence tied to its field
    page.uncheck("#stats-on")
    assert page.locator("#stats-panels").is_hidden()
    page.check("#stats-on")
    page.fill("#stats-every", "0")
    page.locator("#stats-every").dispatch_event("change")
    error = page.locator("#stats-errors").inner_text()
    print(error)
    assert "Training view every 0 is out of range" in error
    assert page.locator("#stats-every").get_attribute("aria-invalid") == "true"


def test_training_view_on_webgpu(server_url, page):
    """The WebGPU engine measures in the page too (SwiftShader here: a few steps)."""
    page.set_default_timeout(400_000)
    open_playground(page, server_url)
    turn_on(page, 2)
    fill_training(page, "tiny", 6, backend="webgpu", seed=3)
    ended = page.evaluate("window.playground.runsEnded")
    press_train(page)
    page.wait_for_function(f"window.playground.runsEnded > {ended}")
    stats = measured(page)
    print(f"\nWebGPU: {page.locator('#stats-note').inner_text()}\n{page.locator('#stats-summary').inner_text()}")
    assert [s["step"] for s in stats] == [2, 4, 6]
    assert all(s["backend"] == "webgpu" for s in stats)
    assert stats[-1]["groups"] == ["embeddings", "block 0", "block 1", "final LayerNorm"]
    assert len(stats[-1]["entropy"]) == TINY_LAYERS
    page.locator("#stats-panels").scroll_into_view_if_needed()
    screenshot(page, "training_view_webgpu")
