"""Presets and the checks before a run, as a person meets them: a preset that cannot fit the backend
chosen now is disabled in the list with the reason (behemoth on WebGPU, whose params buffer passes
SwiftShader's maxStorageBufferBindingSize), and comes back when the backend can hold it; a corpus too
short for the chosen preset is refused before the continue-or-new question, and the refusal suggests a
smaller preset only where one exists that the corpus can train."""
from __future__ import annotations

import re

from e2e.page_actions import open_playground, screenshot, train

MARKED = "(b) => window.playground.presetsMarked?.backend === b"


def options(page) -> dict:
    """{value: (disabled, text)} of the Preset list."""
    return {o["value"]: (o["disabled"], o["text"]) for o in page.locator("#preset option").evaluate_all(
        "os => os.map((o) => ({value: o.value, disabled: o.disabled, text: o.text}))")}


def test_presets_that_cannot_fit_the_chosen_backend_are_disabled_with_the_reason(server_url, page):
    open_playground(page, server_url)
    page.select_option("#backend", "wasm")
    page.wait_for_function(MARKED, arg="wasm")
    on_wasm = options(page)
    print("\nWebAssembly: " + "; ".join(f"{v}{' (disabled)' if d else ''}" for v, (d, _) in on_wasm.items()))
    assert not any(d for d, _ in on_wasm.values()), "headless Chromium's Memory64 build holds every preset"

    page.select_option("#backend", "webgpu")
    page.wait_for_function(MARKED, arg="webgpu")
    on_gpu = options(page)
    limits = page.locator("#preset-limits").inner_text()
    print("WebGPU (SwiftShader): " + "\n  ".join(t for d, t in on_gpu.values() if d) + f"\n#preset-limits: {limits}")
    disabled, text = on_gpu["behemoth"]
    assert disabled
    assert re.search(r"\(does not fit WebGPU here: the params buffer needs 1\.\d+ GiB, more than this adapter's "
                     r"maxStorageBufferBindingSize of", text), text
    assert not on_gpu["tiny"][0] and not on_gpu["small"][0]  # the chosen preset (small) is not touched
    assert limits.startswith("Disabled here: ") and "behemoth (WebGPU: the params buffer needs" in limits
    assert "The chosen preset" not in limits  # small is chosen, and it fits
    # a person cannot pick it: the list skips a disabled option
    page.focus("#preset")
    for _ in range(len(on_gpu)):
        page.keyboard.press("ArrowDown")
    chosen = page.input_value("#preset")
    print(f"ArrowDown to the end of the list picks {chosen}")
    assert chosen != "behemoth" and not on_gpu[chosen][0]
    screenshot(page, "preset_fit_webgpu")

    page.select_option("#backend", "wasm")  # the backend that holds it: offered again, as it was
    page.wait_for_function(MARKED, arg="wasm")
    assert options(page) == on_wasm and page.locator("#preset-limits").inner_text() == ""
    assert page.errors == []


def test_a_chosen_preset_the_new_backend_cannot_hold_says_so_at_once(server_url, page):
    open_playground(page, server_url)
    page.select_option("#backend", "wasm")
    page.select_option("#preset", "behemoth")
    page.select_option("#backend", "webgpu")
    page.wait_for_function(MARKED, arg="webgpu")
    limits = page.locator("#preset-limits")
    print(f"\n{limits.inner_text()}")
    said = "The chosen preset, behemoth, cannot train on WebGPU here: pick another preset or backend."
    assert said in limits.inner_text()
    assert "error" in limits.get_attribute("class")
    page.click("#start")  # Train refuses it with the same reason, and nothing starts
    refused = page.locator("#train-errors").inner_text()
    print(refused)
    assert refused.startswith("behemoth does not fit here: the params buffer needs")
    assert page.evaluate("window.playground.phase") == "idle"
    assert page.errors == []


def test_a_short_corpus_is_refused_before_any_question(server_url, page):
    open_playground(page, server_url)
    train(page, "tiny", 5)  # a model in memory: Train would ask "continue or new?"
    page.select_option("#corpus-source", "paste")
    cases = [
        # tiny has the shortest context: no smaller preset to suggest
        ("tiny", "abcdefghij" * 30, "too short for a context of 32", None),
        # small's context (64) is too long for 500 bytes; tiny's (32) fits both splits
        ("small", "abcdefghij" * 50, "too short for a context of 64",
         "or the preset tiny (context 32), which it can train"),
        # 300 bytes: too short for every preset, so no smaller one is suggested
        ("small", "abcdefghij" * 30, "too short for a context of 64", None),
    ]
    for preset, text, phrase, hint in cases:
        page.select_option("#preset", preset)
        page.fill("#corpus-text", text)
        page.evaluate("document.getElementById('train-errors').textContent = ''")
        page.click("#start")
        page.wait_for_function("document.getElementById('train-errors').textContent !== ''")
        message = page.locator("#train-errors").inner_text()
        asked = page.evaluate("document.getElementById('continue-dialog').open")
        print(f"\n{preset}, {len(text)} bytes: dialog open {asked}; {message}")
        assert not asked, "the question came before the corpus check"
        assert phrase in message
        if hint:
            assert hint in message
        else:
            assert "smaller preset" not in message and "or the preset" not in message
        assert page.evaluate("window.playground.runsEnded") == 1  # nothing started
    screenshot(page, "preset_fit_short_corpus")
    assert page.errors == []
