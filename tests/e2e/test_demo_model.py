"""The pretrained demo model (site/static/models/demo-large.tinygpt, docs/demo_model.md): one click
loads it on either engine, it samples Shakespeare-like text at once, and its validation loss on
TinyShakespeare's validation split is the same in python_ref, in the C++ core and in the page on
WebAssembly and on WebGPU."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from e2e.page_actions import ROOT, open_playground, screenshot, status
from python_ref import tinygpt_file
from python_ref.config import DEFAULT_CORPUS
from python_ref.data import Corpus
from python_ref.evaluate import split_settings, val_windows_loss
from python_ref.model import manifest
from support.tinygpt_native import NativeModel

DEMO = ROOT / "site" / "static" / "models" / "demo-large.tinygpt"


@pytest.fixture(scope="module")
def reference_losses():
    """{level: validation loss} from python_ref and the native C++ core, on the demo file."""
    model, meta = tinygpt_file.load(DEMO)
    val_fraction, windows = split_settings(meta)
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    _, val = corpus.split(val_fraction, model.config.ctx)
    python = val_windows_loss(model, val, windows)
    state = tinygpt_file.read_state(DEMO)  # fp16 on disk; the native core imports float32 weights
    flat = struct.pack("<i", state.step) + b"".join(
        np.ascontiguousarray(state.weights[name], dtype="<f4").tobytes() for name, _ in manifest(state.config))
    with NativeModel(state.config, batch=1) as native:
        native.import_state(flat)
        native.set_corpus(corpus.data, val_fraction)
        cpp = native.eval(windows)
    print(f"\ndemo model, {windows} validation windows: python_ref {python:.6f}, C++ core {cpp:.6f}")
    return {"python_ref": python, "C++": cpp}


def load_demo(page, backend: str):
    page.select_option("#backend", backend)
    page.click("#load-demo")
    page.wait_for_function("/^(Loaded|That )/.test(document.getElementById('status').textContent)")
    assert status(page) == "Loaded large at step 4000 (the demo model).", status(page)


def evaluate(page) -> float:
    page.click("#evaluate")
    page.wait_for_function("window.playground.evaluated !== null", timeout=300_000)
    print(page.locator("#evaluation").inner_text())
    return page.evaluate("window.playground.evaluated.valLoss")


def sample(page, tokens: int) -> str:
    page.fill("#prompt", "ROMEO:")
    page.fill("#max-new", str(tokens))
    page.click("#sample-button")
    page.wait_for_function("!document.getElementById('sample-button').disabled", timeout=300_000)
    text = page.locator("#sample-output").inner_text()
    print(f"{page.locator('#sample-model').inner_text()} {page.locator('#sample-stats').inner_text()}\n{text!r}")
    return text


def test_demo_on_webassembly_samples_and_has_python_refs_validation_loss(server_url, page, reference_losses):
    open_playground(page, server_url)
    load_demo(page, "wasm")
    assert page.evaluate("window.playground.loaded.source") == "demo"
    text = sample(page, 200)
    words = text.split()
    # a trained model writes words: mostly letters and spaces, a speaker's name in capitals, no byte soup
    assert len(text) >= 150 and sum(c.isalpha() or c.isspace() for c in text) / len(text) > 0.85
    assert len(words) > 20 and page.locator("#sample-output .escape").count() == 0
    assert page.locator("#sample-model").inner_text() == "From large at step 4000 (the demo model), on WebAssembly."
    loss = evaluate(page)
    print(f"page (WebAssembly) {loss:.6f}; differences: python_ref {abs(loss - reference_losses['python_ref']):.2e}, "
          f"C++ {abs(loss - reference_losses['C++']):.2e}")
    assert abs(loss - reference_losses["python_ref"]) < 1e-3 and abs(loss - reference_losses["C++"]) < 1e-4
    assert 1.4 < loss < 1.7
    screenshot(page, "demo_wasm_sampled")
    assert page.errors == []


@pytest.mark.slow  # SwiftShader: about 3 minutes for the 64 validation windows of a large model
def test_demo_on_webgpu_samples_and_has_python_refs_validation_loss(server_url, page, reference_losses):
    open_playground(page, server_url)
    if not page.evaluate("window.playground.loaded === null && "
                         "!document.querySelector('#backend option[value=webgpu]').disabled"):
        pytest.skip("no WebGPU option")
    load_demo(page, "webgpu")
    assert page.evaluate("window.playground.loaded.backend") == "webgpu"
    text = sample(page, 24)  # SwiftShader: a few tokens are enough to see it writes
    assert len(text) >= len("ROMEO:") + 20
    loss = evaluate(page)
    print(f"page (WebGPU) {loss:.6f}; differences: python_ref {abs(loss - reference_losses['python_ref']):.2e}, "
          f"C++ {abs(loss - reference_losses['C++']):.2e}")
    assert abs(loss - reference_losses["python_ref"]) < 1e-3
    screenshot(page, "demo_webgpu_sampled")
    assert page.errors == []
