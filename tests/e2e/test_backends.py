"""Both engines in the page: WebGPU (SwiftShader here, labelled as software) trains tiny from a seed
and follows the WebAssembly backend's losses within the engines' parity tolerance; where the page
cannot use something (no cross-origin isolation, no WebGPU adapter) it says so and still trains."""
from __future__ import annotations

import subprocess
import sys

from e2e.page_actions import ROOT, losses, open_playground, parse, screenshot, start_long_run, train
from python_ref import tinygpt_file
from support.server_process import running_server

# 12 steps on each engine, then 6 more from each one's checkpoint on the other (SwiftShader's steps are slow)
PARITY_STEPS, MORE = 12, 6
PARITY_RTOL = 1e-3  # the tolerance tests/webgpu/test_webgpu_trainer.py holds the WGSL trainer to against python_ref


def download(page, path):
    with page.expect_download() as d:
        page.click("#download")
    d.value.save_as(path)
    return path


def continue_uploaded(page, path, backend: str, steps: int) -> list:
    """Uploads `path` with `backend` picked, trains `steps` more; every loss the page shows."""
    page.select_option("#backend", backend)
    page.set_input_files("#upload", str(path))
    page.wait_for_function("window.playground.loaded?.source === 'upload' && "
                           f"window.playground.loaded.backend === '{backend}'")
    step = page.evaluate("window.playground.loaded.step")
    page.fill("#steps", str(steps))
    page.click("#start")
    page.click("#continue-model")
    page.wait_for_function(f"/^Finished: step {step + steps}/.test(document.getElementById('status').textContent)")
    return losses(page)


def relative(a, b, steps) -> float:
    return max(abs(a[s] - b[s]) / abs(b[s]) for s in steps)


def test_webgpu_trains_like_webassembly_and_checkpoints_cross_over(server_url, page, tmp_path):
    """Tiny from one seed on each engine: the same 12 losses within the engines' parity tolerance, and
    each engine's step-12 checkpoint continues on the other engine like the uninterrupted run."""
    # SwiftShader's tiny step, about 1 s in this page alone (2026-12-06) and 2-3 times that beside another test
    # process: a run can outlast the usual wait (PAGE_WAIT_MS) for a run's end
    page.set_default_timeout(400_000)
    open_playground(page, server_url)
    page.select_option("#backend", "webgpu")
    choice = page.locator("#backend-choice").inner_text()
    text = train(page, "tiny", PARITY_STEPS, backend="webgpu", seed=1337)
    build = page.locator("#build").inner_text()
    print(f"\n{choice}\n{build}\n{text}")
    assert text.startswith("Finished"), text
    assert "software: correct, not fast" in choice and "software: correct, not fast" in build
    assert "subgroups of 4 invocations" in build, "the page says what the probe found (SwiftShader's subgroups)"
    gpu = losses(page)
    gpu_file = download(page, tmp_path / f"webgpu-step{PARITY_STEPS}.tinygpt")
    screenshot(page, "backends_webgpu")

    train(page, "tiny", PARITY_STEPS, backend="wasm", seed=1337)
    assert page.evaluate("window.playground.loaded.backend") == "wasm"
    cpu_file = download(page, tmp_path / f"wasm-step{PARITY_STEPS}.tinygpt")
    page.fill("#steps", str(MORE))
    page.click("#start")
    page.click("#continue-model")
    page.wait_for_function(f"/^Finished: step {PARITY_STEPS + MORE}/"
                           ".test(document.getElementById('status').textContent)")
    cpu = losses(page)  # the uninterrupted WebAssembly run
    rel = relative(gpu, cpu, range(1, PARITY_STEPS + 1))
    print(f"WebGPU vs WebAssembly, {PARITY_STEPS} losses from seed 1337: max relative difference {rel:.2e}")
    assert rel < PARITY_RTOL

    after = range(PARITY_STEPS + 1, PARITY_STEPS + MORE + 1)
    gpu_on_cpu = continue_uploaded(page, gpu_file, "wasm", MORE)
    assert gpu_on_cpu[1:PARITY_STEPS + 1] == gpu[1:PARITY_STEPS + 1]  # the history travels in the file
    rel_gpu_on_cpu = relative(gpu_on_cpu, cpu, after)
    cpu_on_gpu = continue_uploaded(page, cpu_file, "webgpu", MORE)
    rel_cpu_on_gpu = relative(cpu_on_gpu, cpu, after)
    print(f"steps {after.start}-{after.stop - 1} vs the uninterrupted run: "
          f"WebGPU checkpoint on WebAssembly {rel_gpu_on_cpu:.2e}, "
          f"WebAssembly checkpoint on WebGPU {rel_cpu_on_gpu:.2e}")
    assert rel_gpu_on_cpu < PARITY_RTOL and rel_cpu_on_gpu < PARITY_RTOL
    screenshot(page, "backends_checkpoints_crossed")
    assert page.errors == []


def test_without_cross_origin_isolation_it_says_so_and_trains_single_threaded(tmp_path, page):
    """The static dist/ served by a plain file server (no COOP/COEP headers): the loader falls back
    to the single-threaded SIMD build, and the page says why."""
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "python_ref.cli", "build", "--out", str(dist)], cwd=ROOT, check=True,
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


def test_stop_on_webgpu_mid_run_settles_the_queued_steps(server_url, page, tmp_path):
    """The page keeps WebGPU steps queued from one burst to the next (step_stream.js). Stop in the middle of
    a run settles them: the status, the loss chart, the saved checkpoint and the downloaded file all reach
    the step the weights are at, with every loss on the way."""
    page.set_default_timeout(400_000)  # SwiftShader: seconds a step (see above)
    open_playground(page, server_url)
    page.select_option("#backend", "webgpu")
    start_long_run(page)
    page.wait_for_function("/^step ([3-9]|\\d\\d+)\\//.test(document.getElementById('status').textContent)")
    page.click("#stop")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('Stopped')")
    text = page.locator("#status").inner_text()
    step = parse(text)["step"]
    shown = losses(page)
    saved = tinygpt_file.read_state(download(page, tmp_path / "stopped.tinygpt"))
    history = saved.header["lossHistory"]
    print(f"\n{text}\nthe file: step {saved.step}, {len(history)} losses, the last {history[-1]}")
    assert saved.step == step and [s for s, _ in history] == list(range(1, step + 1))
    assert [loss for _, loss in history] == shown[1:step + 1] and all(x is None for x in shown[step + 1:])
    # the save at Stop: its step and its last loss, in the row of this run (a table row or, narrow, a card)
    cells = page.locator(f"#checkpoints tbody tr[data-id='{saved.header['run']['id']}'] td").all_inner_texts()
    assert cells[3:5] == [f"{step} of 100000", f"{history[-1][1]:.4f}"], cells  # select, model, corpus, step, loss
    screenshot(page, "backends_webgpu_stopped")
    assert page.errors == []
