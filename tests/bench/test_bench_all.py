"""`tinygpt bench --all` (bench/all.py): one tiny real run over PyTorch CPU, the native core,
one WebAssembly build in Node and WGSL writes a bench.json that docs/bench accepts and valid PNGs
(WGSL skipped on a software adapter), `--plot` redraws them from the JSON, and the pieces that size
and judge a run: step counts sized from the figures so far, the cell cap, the ratio to the best
PyTorch, the backend filter, the decode results."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest
import torch

from conftest import BUILD, ROOT
from bench import all as bench_all
from bench.backends import Budget
from bench.catalogue import catalogue
from python_ref.config import ConfigError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PNG_BYTES = 120 * 1024


def run_cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TINYGPT_BUILD=str(BUILD))
    proc = subprocess.run([sys.executable, "-m", "python_ref.cli", "bench", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    print(proc.stdout, proc.stderr[-3000:])
    return proc


def check_png(path) -> None:
    data = path.read_bytes()
    print(f"{path.name}: {len(data)} bytes")
    assert data.startswith(PNG_SIGNATURE) and len(data) < MAX_PNG_BYTES


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One round at tiny, 2 steps a cell, no decode: the JSON and the folder it was written to."""
    out = tmp_path_factory.mktemp("bench_all")
    proc = run_cli("--all", "--presets", "tiny", "--rounds", "1", "--steps", "2", "--seconds", "0.2",
                   "--backends", "pytorch-cpu,native-*,wasm-node-simd,wgsl-*", "--no-decode", "--out", str(out))
    assert proc.returncode == 0
    return json.loads((out / "bench.json").read_text()), out


def test_bench_all_writes_a_docs_bench_file(tiny_run):
    from server.bench_chart import load_bench

    data, out = tiny_run
    load_bench(out / "bench.json")  # the shape docs/bench/README.md describes
    keys = [s["key"] for s in data["series"]]
    print(f"device {data['device']!r}; series {keys}; skipped {data['skipped']}")
    assert data["presets"] == ["tiny"] and data["command"].startswith("tinygpt bench --all")
    assert keys[0] == "pytorch-cpu" and "native-1t" in keys and "wasm-node-simd" in keys
    assert data["machine"]["cpu"] in data["device"] and data["machine"]["node"] in data["device"]
    for s in data["series"]:
        assert s["ms_per_step"]["tiny"] > 0 and s["min"]["tiny"] <= s["ms_per_step"]["tiny"] <= s["max"]["tiny"]
    assert [(c["backend"], c["round"]) for c in data["cells"]] == [(k, 1) for k in keys]
    assert data["ratios"]["reference"] == data["series"][0]["backend"]  # PyTorch CPU: the line at 1
    assert set(data["ratios"]["series"]) == {s["backend"] for s in data["series"][1:]}
    assert data["decode"] == {"skipped": "--no-decode"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU machine may have a hardware adapter")
def test_wgsl_is_skipped_on_a_software_adapter(tiny_run):
    data, _ = tiny_run
    for key in ("wgsl-node", "wgsl-chromium", "wgsl-chromium-page"):
        reason = data["skipped"][key]
        print(f"{key}: {reason}")
        assert "software adapter" in reason and "no speed figure" in reason
        assert key not in {s["key"] for s in data["series"]}


@pytest.mark.parametrize("series", ["WgslChromium", "WgslChromiumPageLoop"])
@pytest.mark.browser
@pytest.mark.swiftshader
def test_wgsl_in_chromium_takes_a_cells_figure_from_the_page(monkeypatch, series):
    """Its cell's plumbing, let onto SwiftShader (browser_bench.py --allow-software): never a speed. The page's
    own training loop (step_stream.js) also times its round draining every burst."""
    from bench import js_backends as bench_js

    backend = getattr(bench_js, series)()
    backend.root = ROOT
    run_bench = backend.run_bench
    # no warm-up steps (the last --warmup wins): SwiftShader's steps take seconds and its timings mean nothing
    monkeypatch.setattr(backend, "run_bench",
                        lambda *args, out=None: run_bench(*args, "--allow-software", "--warmup", "0", out=out))
    cell = backend.measure("tiny", Budget(steps=2, seconds=0.1), None)
    print(cell)
    assert cell["steps"] == 2 and cell["ms_per_step"] > 0 and cell["browser"].startswith("Chromium ")
    if series == "WgslChromiumPageLoop":
        assert cell["drained_each_burst_ms"] > 0


def test_plots_are_small_valid_pngs(tiny_run):
    _, out = tiny_run
    for name in ("bench-step-time.png", "bench-vs-pytorch.png"):
        check_png(out / name)
    assert not (out / "bench-decode.png").exists()  # no decode figures, no decode plot


def test_plot_redraws_from_the_json(tiny_run, tmp_path):
    _, out = tiny_run
    proc = run_cli("--plot", str(out / "bench.json"), "--out", str(tmp_path))
    assert proc.returncode == 0
    drawn = sorted(p.name for p in tmp_path.iterdir())
    print(f"redrawn: {drawn}")
    assert drawn == ["bench-step-time.png", "bench-vs-pytorch.png"]
    for p in tmp_path.iterdir():
        check_png(p)


def test_plot_of_a_bad_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    proc = run_cli("--plot", str(bad))
    assert proc.returncode == 2 and "bad.json: no 'title' key" in proc.stderr and "Traceback" not in proc.stderr


def test_all_only_options_need_all():
    proc = run_cli("--rounds", "3", "--preset", "tiny")
    assert proc.returncode == 2 and "--rounds" in proc.stderr


def test_backend_filter_takes_patterns_and_names_the_backends():
    backends = catalogue(threads=2)
    keys = [b.key for b in bench_all.select(backends, "native-*,wasm-node-s*")]
    print(f"selected {keys}")
    assert keys == ["native-1t", "native-2t", "wasm-node-simd", "wasm-node-scalar"]
    with pytest.raises(ConfigError, match="--backends nope matches no backend; the backends are pytorch-cpu"):
        bench_all.select(backends, "nope")


def test_step_counts_are_sized_from_the_figures_so_far():
    budget = Budget(steps=3, seconds=2.0)
    figures = {("b", "tiny"): [10.0, 12.0]}
    own = bench_all.estimate_ms(figures, "b", "tiny")
    scaled = bench_all.estimate_ms(figures, "b", "small")
    ratio = bench_all.step_flops("small") / bench_all.step_flops("tiny")
    print(f"own {own}; small from tiny {scaled} (FLOPs x{ratio:.2f}); counts {budget.count(10.0)}, "
          f"{budget.count(scaled[0])}, {budget.count(None)}, {budget.count(1e5)}")
    assert own == (10.0, "its earlier round")
    assert scaled[0] == pytest.approx(10.0 * ratio) and "tiny" in scaled[1]
    assert bench_all.estimate_ms(figures, "other", "tiny") is None
    assert budget.count(10.0) == 200 and budget.count(None) == 3 and budget.count(1e5) == 3


def test_a_cell_expected_to_run_too_long_is_skipped_saying_why():
    class Slow:
        key = "slow"

        def measure(self, *args):
            raise AssertionError("a skipped cell must not run")

    cell = bench_all.measure_cell(Slow(), "small", Budget(), 60.0, {("slow", "tiny"): [20_000.0]})
    print(cell)
    assert "over --max-cell-seconds 60" in cell["skipped"]


def test_a_failing_cell_is_recorded_and_the_run_goes_on():
    class Broken:
        key = "broken"

        def measure(self, *args):
            raise RuntimeError("no such build")

    assert bench_all.measure_cell(Broken(), "tiny", Budget(), 60.0, {}) == {"error": "RuntimeError: no such build"}


def test_ratios_on_a_gpu_machine_are_to_the_best_cuda_step():
    series = [{"backend": name, "family": family, "ms_per_step": ms} for name, family, ms in (
        ("PyTorch CPU", "PyTorch CPU", {"tiny": 10.0}),
        ("eager", "PyTorch CUDA", {"tiny": 4.0, "small": 5.0}),
        ("graph", "PyTorch CUDA", {"tiny": 0.5, "small": 1.0}),
        ("WGSL", "WGSL", {"tiny": 0.25, "small": 2.0}))]
    ratios = bench_all.speed_ratios(series, ["tiny", "small"])
    print(ratios)
    assert ratios["reference"] == "the best PyTorch CUDA step"
    assert ratios["series"]["WGSL"] == {"tiny": 2.0, "small": 0.5} and ratios["series"]["graph"]["tiny"] == 1.0
    assert ratios["series"]["PyTorch CPU"] == {"tiny": 0.05}


def fake_decode_bench(available: list[str]):
    """A stand-in for bench/decode.py with its interface, fast."""
    def decode_bench(engine, preset, new_tokens=512):
        if engine not in available:
            raise RuntimeError(f"{engine} is not available: no such thing here")
        if engine == "native" and preset == "small":
            raise RuntimeError("tg_generate failed")
        kv = {"tiny": 2000.0, "small": 1000.0}[preset]
        return {"engine": engine, "preset": preset, "kv_tokens_per_s": kv, "recompute_tokens_per_s": kv / 8,
                "speedup": 8.0, "same_tokens": True}
    engines = ("pytorch-cpu", "pytorch-cuda", "native", "wasm-node", "wgsl-node", "wgsl-chromium")
    return types.SimpleNamespace(ENGINES=engines,
                                 available_decode_engines=lambda engines: [e for e in engines if e in available],
                                 decode_bench=decode_bench)


def test_decode_follows_the_selected_backends(monkeypatch):
    monkeypatch.setitem(sys.modules, "bench.decode", fake_decode_bench(["pytorch-cpu", "native"]))
    selected = bench_all.select(catalogue(threads=2), "pytorch-*,native-1t,wgsl-node")
    decode = bench_all.run_decode(selected, ["tiny", "small"], 512)
    print(decode)
    assert [(r["engine"], r["preset"]) for r in decode["results"]] == [
        ("pytorch-cpu", "tiny"), ("native", "tiny"), ("pytorch-cpu", "small")]
    assert set(decode["skipped"]) == {"pytorch-cuda", "wgsl-node"}  # wasm-node was not selected
    assert decode["errors"] == [{"engine": "native", "preset": "small", "error": "RuntimeError: tg_generate failed"}]


def test_the_pages_series_brings_the_pages_decode(monkeypatch):
    monkeypatch.setitem(sys.modules, "bench.decode", fake_decode_bench(["wgsl-chromium"]))
    selected = bench_all.select(catalogue(threads=2), "pytorch-cuda-graph,wgsl-chromium-page")
    decode = bench_all.run_decode(selected, ["tiny"], 512)
    print(decode)
    assert [(r["engine"], r["preset"]) for r in decode["results"]] == [("wgsl-chromium", "tiny")]
    assert set(decode["skipped"]) == {"pytorch-cuda"}


def test_decode_plot_is_drawn_when_there_are_figures(monkeypatch, tmp_path):
    from bench.plots import draw_plots

    monkeypatch.setitem(sys.modules, "bench.decode", fake_decode_bench(["pytorch-cpu", "native"]))
    data = {"title": "t", "device": "a machine", "date": "today", "presets": ["tiny", "small"],
            "series": [{"backend": "PyTorch CPU", "family": "PyTorch CPU", "ms_per_step": {"tiny": 1.0, "small": 3.0}}],
            "decode": bench_all.run_decode(catalogue(threads=1), ["tiny", "small"], 512)}
    written = draw_plots(data, tmp_path / "x")
    assert [p.name for p in written] == ["x-step-time.png", "x-decode.png"]
    for p in written:
        check_png(p)
