"""Both engines in the page: WebGPU (SwiftShader here, labelled as software) trains tiny from a seed
and follows the WebAssembly backend's losses within the engines' parity tolerance; where the page
cannot use something (no cross-origin isolation, no WebGPU adapter) it says so and still trains."""
from __future__ import annotations

import subprocess
import sys

from e2e.page_actions import ROOT, losses, open_playground, screenshot, train
from server_process import running_server

PARITY_STEPS = 20
PARITY_RTOL = 1e-3  # the tolerance tests/test_webgpu_trainer.py holds the WGSL trainer to against python_ref


def test_webgpu_trains_tiny_like_webassembly(server_url, page):
    open_playground(page, server_url)
    page.select_option("#backend", "webgpu")
    choice = page.locator("#backend-choice").inner_text()
    text = train(page, "tiny", PARITY_STEPS, backend="webgpu", seed=1337)
    gpu = losses(page)[1:]
    build = page.locator("#build").inner_text()
    print(f"\n{choice}\n{build}\n{text}")
    assert text.startswith("Finished"), text
    assert "software: correct, not fast" in choice and "software: correct, not fast" in build
    screenshot(page, "backends_webgpu")
    train(page, "tiny", PARITY_STEPS, backend="wasm", seed=1337)
    cpu = losses(page)[1:]
    print(page.locator("#build").inner_text())
    print("WebGPU:", gpu[:3], "\nWebAssembly:", cpu[:3])
    assert page.evaluate("window.playground.loaded.backend") == "wasm"
    rel = max(abs(a - b) / abs(b) for a, b in zip(gpu, cpu))
    print(f"WebGPU vs WebAssembly, {PARITY_STEPS} losses from seed 1337: max relative difference {rel:.2e}")
    assert len(gpu) == len(cpu) == PARITY_STEPS and rel < PARITY_RTOL
    assert page.errors == []


def test_a_webgpu_checkpoint_continues_on_webassembly(server_url, page, tmp_path):
    """WebGPU trains 20 steps (downloaded there) and 10 more; the file uploaded with WebAssembly
    picked continues those 10 steps within the engines' parity tolerance."""
    open_playground(page, server_url)
    train(page, "tiny", 20, backend="webgpu", seed=77)
    with page.expect_download() as d:
        page.click("#download")
    path = tmp_path / "webgpu-step20.tinygpt"
    d.value.save_as(path)
    page.fill("#steps", "10")
    page.click("#start")
    page.click("#continue-model")
    page.wait_for_function("/^Finished: step 30/.test(document.getElementById('status').textContent)")
    gpu = losses(page)
    page.select_option("#backend", "wasm")
    page.set_input_files("#upload", str(path))
    page.wait_for_function("window.playground.loaded?.source === 'upload' && window.playground.loaded.backend === 'wasm'")
    assert page.evaluate("window.playground.loaded.step") == 20
    page.fill("#steps", "10")
    page.click("#start")
    page.click("#continue-model")
    page.wait_for_function("/^Finished: step 30/.test(document.getElementById('status').textContent)")
    cpu = losses(page)
    assert cpu[1:21] == gpu[1:21]  # the history travels in the file
    rel = max(abs(cpu[s] - gpu[s]) / gpu[s] for s in range(21, 31))
    print(f"\nsteps 21-30 on WebAssembly from a WebGPU checkpoint vs on WebGPU: max relative difference {rel:.2e}")
    assert rel < PARITY_RTOL
    screenshot(page, "backends_webgpu_checkpoint_on_wasm")
    assert page.errors == []


def test_without_cross_origin_isolation_it_says_so_and_trains_single_threaded(tmp_path, page):
    """The static dist/ served by a plain file server (no COOP/COEP headers): the loader falls back
    to the single-threaded SIMD build, and the page says why."""
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "server", "build", "--out", str(dist)], cwd=ROOT, check=True,
                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    plain = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(dist), "{port}"]
    with running_server(plain) as url:
        open_playground(page, url)
        assert page.evaluate("crossOriginIsolated") is False
        features = page.locator("#features").inner_text()
        print("\n" + features)
        assert "No WebAssembly threads: not cross-origin isolated" in features
        assert "relaxed SIMD is in this engine, but its build needs threads" in features
        text = train(page, "tiny", 5)
        build = page.locator("#build").inner_text()
        print(f"{text}\n{build}")
        assert text.startswith("Finished")
        assert "build: simd (1 thread)" in build and "not cross-origin isolated" in build
        screenshot(page, "backends_not_isolated")
