"""`.tinygpt` in and out of the page: what the page downloads (full and compact fp16) loads in
python_ref and gives the validation loss the page showed, and resumes under torchrun as in one
process; a model python_ref trained uploads and samples in the page, token for token as python_ref's
greedy sample."""
from __future__ import annotations

import subprocess
import sys

import pytest

from e2e.page_actions import ROOT, open_playground, screenshot, train

from python_ref import tinygpt_file
from python_ref.config import DEFAULT_CORPUS
from python_ref.data import Corpus
from python_ref.evaluate import split_settings, val_windows_loss
from python_ref.sample import generate
from python_ref.train import new_run


def python_val_loss(path) -> float:
    model, meta = tinygpt_file.load(path)
    val_fraction, windows = split_settings(meta)
    _, val = Corpus.from_file(DEFAULT_CORPUS).split(val_fraction, model.config.ctx)
    return val_windows_loss(model, val, windows)


def download(page, button, path):
    with page.expect_download() as d:
        page.click(button)
    d.value.save_as(path)
    return path


def test_downloads_load_in_python_ref_with_the_pages_validation_loss(server_url, page, tmp_path):
    open_playground(page, server_url)
    train(page, "tiny", 100, seed=9)
    shown = page.evaluate("window.playground.valLosses[100]")
    full = download(page, "#download", tmp_path / "full.tinygpt")
    compact = download(page, "#download-fp16", tmp_path / "fp16.tinygpt")
    got_full, got_fp16 = python_val_loss(full), python_val_loss(compact)
    state = tinygpt_file.read_state(full)
    print(f"\npage validation {shown:.6f}; "
          f"python_ref on the full file {got_full:.6f} (diff {abs(got_full - shown):.2e}), "
          f"on the fp16 file {got_fp16:.6f} (diff {abs(got_fp16 - shown):.2e}); "
          f"sizes {full.stat().st_size} / {compact.stat().st_size} bytes")
    assert state.step == 100 and state.m is not None and state.header["dataState"]["batchesDrawn"] == 100
    assert state.header["corpus"]["name"] == "tinyshakespeare.txt"
    assert abs(got_full - shown) < 1e-4
    assert abs(got_fp16 - shown) < 1e-2
    assert compact.stat().st_size < full.stat().st_size / 5
    screenshot(page, "files_downloaded")
    assert page.errors == []

    # the page's file resumes under torchrun (2 gloo ranks) exactly as in one process
    resumed = {}
    for name, extra in [("one process", []), ("2 ranks", ["--nproc", "2"])]:
        out = tmp_path / f"resumed-{len(extra)}.tinygpt"
        subprocess.run([sys.executable, "-m", "python_ref.cli", "train", "--resume", str(full), "--steps", "110",
                        "--device", "cpu", "--quiet", "--out", str(out), *extra], cwd=ROOT, check=True,
                       capture_output=True, timeout=300)
        resumed[name] = tinygpt_file.read_state(out).header["lossHistory"][100:]
    rel = max(abs(a[1] - b[1]) / b[1] for a, b in zip(resumed["2 ranks"], resumed["one process"]))
    print("steps 101-110 from the page's file: under torchrun (2 ranks) vs one process, "
          f"max relative difference {rel:.2e}")
    assert [s for s, _ in resumed["2 ranks"]] == list(range(101, 111)) and rel < 1e-5


def greedy_in_page(page, backend: str, path, step: int, prompt: bytes, n: int) -> str:
    """Upload `path` on `backend` and sample n greedy bytes after `prompt`: the text the page shows."""
    page.select_option("#backend", backend)
    page.set_input_files("#upload", str(path))
    page.wait_for_function("window.playground.loaded?.source === 'upload' && "
                           f"window.playground.loaded.backend === '{backend}'")
    assert page.evaluate("[window.playground.loaded.step, window.playground.loaded.backend]") == [step, backend]
    page.fill("#prompt", prompt.decode())
    page.fill("#temperature", "0")
    page.fill("#top-k", "0")
    page.fill("#max-new", str(n))
    page.click("#sample-button")
    page.wait_for_function("!document.getElementById('sample-button').disabled")
    return page.locator("#sample-output").inner_text()


def test_a_python_ref_model_uploads_and_samples_token_identically(server_url, page, tmp_path):
    run = new_run("tiny", device="cpu", seed=21)
    run.run(600, progress=False)
    path = tmp_path / "python.tinygpt"
    run.save(path)
    # 120 bytes: the tiny window of 32 restarts six times, which WebGPU's decode batches do on the GPU
    prompt, n = b"ROMEO:", 120
    expected = (prompt + generate(run.model, prompt, n, temperature=0.0, top_k=0, seed=0)).decode("utf-8",
                                                                                              errors="replace")
    open_playground(page, server_url)
    shown = {}
    for backend in ("wasm", "webgpu"):
        shown[backend] = greedy_in_page(page, backend, path, 600, prompt, n)
        screenshot(page, f"files_uploaded_and_sampled_{backend}")
    print(f"\npython_ref: {expected!r}\n" + "\n".join(f"{b + ':':11} {t!r}" for b, t in shown.items()))
    assert shown == {"wasm": expected, "webgpu": expected}
    page.wait_for_function("document.querySelectorAll('#checkpoints tbody tr').length >= 1")  # kept in OPFS too
    assert page.errors == []


@pytest.mark.alone  # gloo ranks: run with no other test process (tests/python_ref/test_distributed.py says why)
def test_a_torchrun_fsdp_checkpoint_samples_the_same_on_both_engines(server_url, page, tmp_path):
    """2 gloo ranks with FSDP2 train and write the file; the page loads it on WebAssembly and on WebGPU."""
    path = tmp_path / "fsdp.tinygpt"
    subprocess.run([sys.executable, "-m", "python_ref.cli", "train", "--nproc", "2", "--fsdp", "--preset", "tiny",
                    "--steps", "300", "--seed", "5", "--device", "cpu", "--quiet", "--out", str(path)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    assert tinygpt_file.read_state(path).header["training"]["fsdp"] is True
    prompt, n = b"KING:", 24  # short: WebGPU runs on SwiftShader here
    expected = (prompt + generate(tinygpt_file.load(path)[0], prompt, n, temperature=0.0, top_k=0, seed=0)) \
        .decode("utf-8", errors="replace")
    open_playground(page, server_url)
    shown = {backend: greedy_in_page(page, backend, path, 300, prompt, n) for backend in ("wasm", "webgpu")}
    print(f"\npython_ref: {expected!r}\n" + "\n".join(f"{b + ':':11} {t!r}" for b, t in shown.items()))
    assert shown == {"wasm": expected, "webgpu": expected}
    screenshot(page, "files_torchrun_fsdp_on_webgpu")
    assert page.errors == []


def test_a_model_trained_on_another_corpus_says_so(server_url, page, tmp_path):
    other = Corpus.from_bytes(b"the quick brown fox jumps over the lazy dog. " * 400, "fox.txt")
    run = new_run("tiny", corpus=other, device="cpu", seed=3)
    run.run(5, progress=False)
    path = tmp_path / "fox.tinygpt"
    run.save(path)
    open_playground(page, server_url)
    page.select_option("#backend", "wasm")
    page.set_input_files("#upload", str(path))
    page.wait_for_function("window.playground.loaded?.source === 'upload'")
    text = page.locator("#notice").inner_text()
    print("\n" + text)
    assert "trained on fox.txt (18000 bytes" in text and "measured on tinyshakespeare.txt" in text
    assert "Train will ask which corpus it continues on" in text
    screenshot(page, "files_other_corpus")
    assert page.errors == []
