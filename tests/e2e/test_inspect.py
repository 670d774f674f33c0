"""A look inside, in the page: for a model python_ref trained and the page loaded, the attention
view draws the probabilities python_ref computes for the prompt, and a greedy sample's logit view
shows python_ref's top-5 next-byte probabilities, on WebAssembly and on WebGPU (SwiftShader here)."""
from __future__ import annotations

import numpy as np
import pytest

from e2e.page_actions import open_playground, screenshot

from python_ref import tinygpt_file
from python_ref.look_inside import attention_weights, generation_probs, top_bytes
from python_ref.train import new_run

PROMPT = "ROMEO:\tBut soft, é\x07light"  # a tab, a two-byte character and a control byte among the labels
NEW = 12


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    run = new_run("tiny", device="cpu", seed=21)
    run.run(300, progress=False)
    path = tmp_path_factory.mktemp("inspect") / "python.tinygpt"
    run.save(path)
    return path


@pytest.mark.parametrize("backend", ["wasm", "webgpu"])
def test_attention_and_logit_views_show_python_refs_numbers(server_url, page, model_file, backend):
    model = tinygpt_file.load(model_file)[0]
    prompt = PROMPT.encode()
    open_playground(page, server_url)
    page.select_option("#backend", backend)
    page.set_input_files("#upload", str(model_file))
    page.wait_for_function("window.playground.loaded?.source === 'upload' && "
                           f"window.playground.loaded.backend === '{backend}'")
    page.fill("#prompt", PROMPT)

    page.click("#attention-button")
    page.wait_for_function("window.playground.attention?.T > 0")
    shown = page.evaluate("(({tokens, nLayer, nHead, T, weights}) => ({tokens: Array.from(tokens), nLayer, nHead, T,"
                          " weights: Array.from(weights)}))(window.playground.attention)")
    ref = attention_weights(model, prompt)
    got = np.array(shown["weights"], np.float32).reshape(ref.shape)
    diff = float(np.abs(got - ref).max())
    print(f"\n{backend}: attention {ref.shape} of {len(prompt)} prompt bytes drawn by the page vs python_ref: "
          f"max difference {diff:.3g} (bar 1e-5)")
    assert shown["tokens"] == list(prompt) and diff < 1e-5
    page.select_option("#attention-layer", "1")
    page.select_option("#attention-head", "2")
    page.focus("#attention-canvas")
    page.keyboard.press("ArrowLeft")
    assert page.locator("#attention-cell").inner_text().startswith(f"query {len(prompt) - 1} 't' → "
                                                                    f"key {len(prompt) - 2} 'h': ")

    page.fill("#temperature", "0")
    page.fill("#top-k", "0")
    page.fill("#max-new", str(NEW))
    page.click("#sample-button")
    page.wait_for_function("!document.getElementById('sample-button').disabled")
    steps = page.evaluate("window.playground.logits")
    want = generation_probs(model, prompt, NEW, 0.0, 0, 0)
    assert [s["token"] for s in steps] == [t for t, _ in want]
    top_diff = 0.0
    for s, (_, probs) in zip(steps, want):
        expected = top_bytes(probs)
        assert [t["byte"] for t in s["top"]] == [b for b, _ in expected]
        top_diff = max(top_diff, max(abs(t["p"] - p) for t, (_, p) in zip(s["top"], expected)))
    print(f"{backend}: greedy {bytes(s['token'] for s in steps)!r}: the page's top-5 vs python_ref's softmax, "
          f"max difference {top_diff:.3g} (bar 1e-5)")
    assert top_diff < 1e-5

    page.hover("#logit-tokens .logit-chip >> nth=2")
    assert page.locator("#logit-panel li").count() == 5
    page.focus("#logit-tokens .logit-chip >> nth=2")
    page.keyboard.press("ArrowRight")
    assert page.locator("#logit-panel p").inner_text().startswith("Byte 4,")
    page.locator("#inside").scroll_into_view_if_needed()
    screenshot(page, f"inspect_{backend}")
    assert page.errors == []
