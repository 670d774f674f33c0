#!/usr/bin/env python3
"""Benchmark of the WebAssembly builds: ms/step and tokens/s for presets tiny..xl, in Node and in
headless Chromium's module worker (scalar, SIMD, threads with 1 and 2 threads; Memory64 in Chromium
only). Not a test: one run, one machine; prints a Markdown table. Run it alone, e.g.
    flock /tmp/tinygpt-bench.lock ~/.cache/tinygpt/venv/bin/python wasm/scripts/bench_wasm.py
It reuses the test drivers (tests/wasm/*.mjs via tests/wasm_support.py) so it measures exactly
the code the tests check. Each cell: median of the steps after the first (warm-up)."""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from wasm_support import chromium_page, model_spec, run_node, static_server  # noqa: E402

STEPS = {"tiny": 12, "small": 8, "medium": 5, "large": 4, "xl": 4}
CONFIGS = [("scalar", 1), ("simd", 1), ("threads", 1), ("threads", 2)]


def cpu_model() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def spec_for(preset: str, build: str, threads: int) -> dict:
    spec = model_spec(preset)
    spec.update(build=build, prefer=build, threads=threads, initSeed=spec["training"]["seed"],
                corpus=None, mode="fixed-batch", steps=STEPS[preset])
    return spec


def cell(result: dict, spec: dict) -> tuple[float, float]:
    ms = statistics.median(result["stepMs"][1:])
    tokens = spec["config"]["batch"] * spec["config"]["ctx"]
    return ms, tokens / (ms / 1000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="tiny,small,medium,large,xl")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    presets = args.presets.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in presets:
            for build, threads in CONFIGS:
                spec = spec_for(preset, build, threads)
                ms, tps = cell(run_node(spec, Path(tmp)), spec)
                rows.append(("Node 20", preset, build, threads, ms, tps))
                print(f"Node     {preset:7s} {build:8s} {threads}t {ms:9.1f} ms/step {tps:9.0f} tok/s", flush=True)
        if not args.no_browser:
            with static_server(isolated=True) as url, chromium_page(url) as page:
                page.set_default_timeout(3_600_000)
                for preset in presets:
                    for build, threads in CONFIGS + [("memory64", 2)]:
                        spec = spec_for(preset, build, threads)
                        r = page.evaluate("spec => window.runInWorker(spec)", spec)
                        if "error" in r:
                            raise SystemExit(f"Chromium {preset} {build}: {r['error']}")
                        ms, tps = cell(r, spec)
                        rows.append(("Chromium", preset, build, r["threads"], ms, tps))
                        print(f"Chromium {preset:7s} {build:8s} {r['threads']}t {ms:9.1f} ms/step {tps:9.0f} tok/s", flush=True)
    chromium = subprocess.run(["chromium", "--version"], capture_output=True, text=True).stdout.strip()
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"\nCPU: {cpu_model()} ({subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores); "
          f"Node {node}; {chromium}\n")
    print("| engine | preset | build | threads | ms/step | tokens/s |\n|---|---|---|---|---:|---:|")
    for engine, preset, build, threads, ms, tps in rows:
        print(f"| {engine} | {preset} | {build} | {threads} | {ms:.1f} | {tps:.0f} |")
    print("\n" + json.dumps([dict(zip(("engine", "preset", "build", "threads", "ms", "tokens_per_s"), r)) for r in rows]))


if __name__ == "__main__":
    main()
