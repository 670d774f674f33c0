#!/usr/bin/env python3
"""Benchmark of the WebAssembly builds: ms/step and tokens/s for presets tiny..xl, in Node and in
headless Chromium's module worker (scalar, SIMD, threads and relaxed with 1 and 2 threads; Memory64
in Chromium only; Node runs the relaxed build with --experimental-wasm-relaxed-simd), beside the
native C++ core (1 and 2 threads) and PyTorch (2 threads) as references measured in the same rounds,
so that a slow spell of the machine shows in them too. Not a test: one run, one machine; prints a
Markdown table. Run it alone, e.g.
    flock /tmp/tinygpt-bench.lock ~/.cache/tinygpt/venv/bin/python bench/wasm/builds.py
It runs the scenario the tests run (bench/wasm/scenario.mjs through bench/hosts.py), so it measures
exactly the code the tests check. One measurement: the median of the steps after the first (warm-up).
With --rounds R every configuration is measured R times, round-robin (all presets and builds once,
then again), so a slow spell of a shared machine hits every column alike; a cell is the median
of its R measurements, with their range."""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]
from bench.hosts import NATIVE_LIB, headless_chromium, model_spec, node_scenario, static_server  # noqa: E402
from bench.machine import cpu_model  # noqa: E402

STEPS = {"tiny": 12, "small": 8, "medium": 5, "large": 4, "xl": 4}
CONFIGS = [("scalar", 1), ("simd", 1), ("threads", 1), ("threads", 2), ("relaxed", 1), ("relaxed", 2)]


def fixed_batch_spec(preset: str, build: str, threads: int, steps: int) -> dict:
    """The scenario that times `steps` training steps (the first one the warm-up) of a build on one
    fixed batch, as bench/wasm/scenario.mjs runs it in Node and in a browser worker."""
    spec = model_spec(preset)
    spec.update(build=build, prefer=build, threads=threads, initSeed=spec["training"]["seed"],
                corpus=None, mode="fixed-batch", steps=steps)
    return spec


def spec_for(preset: str, build: str, threads: int) -> dict:
    # The scalar build takes seconds per step at large/xl: fewer steps (still one warm-up + 2).
    steps = max(3, STEPS[preset] // 2) if build == "scalar" else STEPS[preset]
    return fixed_batch_spec(preset, build, threads, steps)


def reference_ms(preset: str, what: str, threads: int, corpus: bytes) -> float:
    """ms/step of the native C++ core (build/native/libtinygpt.so) or PyTorch, ~3 s of steps."""
    from bench.cpu.native import bench_step_native, bench_step_torch  # here: it loads torch
    if what == "native":
        return 1e3 * bench_step_native(NATIVE_LIB, preset, threads, 3.0, corpus)
    return 1e3 * bench_step_torch(preset, threads, 3.0)


def checked(result: dict) -> dict:
    if "error" in result:
        raise RuntimeError(f"node scenario failed: {result['error']}")
    return result


def step_ms(result: dict) -> float:
    return statistics.median(result["stepMs"][1:])


def tokens_per_step(preset: str) -> int:
    config = model_spec(preset)["config"]
    return config["batch"] * config["ctx"]


def parse_configs(text: str) -> list[tuple[str, int]]:
    """'threads:1,relaxed:2' -> [('threads', 1), ('relaxed', 2)]"""
    return [(b, int(t)) for b, t in (item.split(":") for item in text.split(","))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="tiny,small,medium,large,xl")
    ap.add_argument("--configs", default=",".join(f"{b}:{t}" for b, t in CONFIGS),
                    help="build:threads list (default: all of them)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--no-reference", action="store_true", help="skip the native C++ and PyTorch columns")
    args = ap.parse_args()
    presets = args.presets.split(",")
    configs = parse_configs(args.configs)
    runs: dict[tuple, list[float]] = {}

    def record(engine, preset, build, threads, ms):
        runs.setdefault((engine, preset, build, threads), []).append(ms)
        print(f"{engine:8s} {preset:7s} {build:8s} {threads}t {ms:9.1f} ms/step", flush=True)

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        page = None
        if not args.no_browser:
            url = stack.enter_context(static_server(isolated=True))
            page = stack.enter_context(headless_chromium(url))
            page.set_default_timeout(3_600_000)
        corpus = (ROOT / "site" / "static" / "data" / "tinyshakespeare.txt").read_bytes()
        for _ in range(args.rounds):
            for preset in presets:
                if not args.no_reference:
                    for what, threads in (("native", 1), ("native", 2), ("pytorch", 2)):
                        record(what, preset, "C++" if what == "native" else "torch", threads,
                               reference_ms(preset, what, threads, corpus))
                for build, threads in configs:
                    spec = spec_for(preset, build, threads)
                    record("Node 20", preset, build, threads, step_ms(checked(node_scenario(spec, Path(tmp)))))
                if page is None:
                    continue
                for build, threads in configs + [("memory64", 2)]:
                    spec = spec_for(preset, build, threads)
                    r = page.evaluate("spec => window.runInWorker(spec)", spec)
                    if "error" in r:
                        raise SystemExit(f"Chromium {preset} {build}: {r['error']}")
                    record("Chromium", preset, build, r["threads"], step_ms(r))
    chromium = ("" if args.no_browser
                else subprocess.run(["chromium", "--version"], capture_output=True, text=True).stdout.strip())
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"\nCPU: {cpu_model()} ({subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores); "
          f"Node {node}; {chromium or 'no browser'}; {args.rounds} round(s)\n")
    print("| engine | preset | build | threads | ms/step (median) | range | tokens/s |\n"
          "|---|---|---|---|---:|---:|---:|")
    rows = []
    for (engine, preset, build, threads), ms_list in runs.items():
        ms = statistics.median(ms_list)
        tps = tokens_per_step(preset) / (ms / 1000)
        rows.append(dict(engine=engine, preset=preset, build=build, threads=threads, ms=ms, runs=ms_list,
                         tokens_per_s=tps))
        print(f"| {engine} | {preset} | {build} | {threads} | {ms:.1f} | "
              f"{min(ms_list):.0f}–{max(ms_list):.0f} | {tps:.0f} |")
    print("\n" + json.dumps(rows))


if __name__ == "__main__":
    main()
