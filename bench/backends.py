"""The training backends `tinygpt bench --all` measures, behind one small interface, and the ones that
run inside this process: PyTorch on the CPU, PyTorch on a CUDA GPU (eager, CUDA graph, CUDA graph +
torch.compile) and the native C++ core. The backends run by a JavaScript engine (WebAssembly in Node
and in Chromium, WGSL in Node) are in js_backends.py; catalogue.py lists them all, in the order a chart
shows them.

A backend's `key` (what --backends matches) starts with the name of its decode engine
(bench/decode.py: pytorch-cpu, pytorch-cuda, native, wasm-node, wgsl-node), so the decode
figures follow the same selection.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .torch_step import bench_preset
from python_ref.resources import CHECKOUT, ROOT


class Unavailable(Exception):
    """This backend cannot run on this machine; the message says why (it goes into bench.json)."""


@dataclass(frozen=True)
class Budget:
    """What one cell (a backend at a preset, in one round) may spend: at least `steps` timed steps,
    and about `seconds` of them. Backends that time steps themselves stop when both are met; those
    that must be told a count up front get `count(estimate)`."""
    steps: int = 3
    seconds: float = 2.0
    max_steps: int = 500

    def count(self, estimate_ms: float | None) -> int:
        if estimate_ms is None:  # nothing measured yet to size it by: the minimum
            return self.steps
        return max(self.steps, min(self.max_steps, round(self.seconds * 1e3 / estimate_ms)))


class Backend:
    """One series of the benchmark. `start` raises Unavailable when it cannot run here; `measure`
    returns {"ms_per_step", "steps", ...} for one preset, or raises (the error is recorded)."""
    key: str
    label: str
    family: str
    method: str  # how a cell's figure is taken, for the reader of bench.json

    def start(self, stack: contextlib.ExitStack) -> None:
        pass

    def measure(self, preset: str, budget: Budget, estimate_ms: float | None) -> dict:
        raise NotImplementedError


def checkout() -> Path:
    """The repository, with its scripts and test drivers importable; Unavailable from an installed wheel,
    which carries neither the C++ build nor the Node drivers."""
    if CHECKOUT is None:
        raise Unavailable("needs a checkout of the repository (the builds and drivers are not installed)")
    for path in (CHECKOUT, CHECKOUT / "tests"):  # wasm.*, and tests/support as bench_wasm.py imports it
        if str(path) not in sys.path:
            sys.path.append(str(path))
    return CHECKOUT


def build_dir() -> Path:
    return Path(os.environ.get("TINYGPT_BUILD", checkout() / "build"))


class PyTorchCPU(Backend):
    family = "PyTorch CPU"
    key = "pytorch-cpu"
    method = "bench.torch_step.bench_preset: mean of the timed steps, after 2 warm-up steps"

    def __init__(self, threads: int):
        self.threads = threads
        self.label = f"PyTorch CPU, {threads} thread{'s' * (threads > 1)}"

    def measure(self, preset, budget, estimate_ms):
        steps = budget.count(estimate_ms)
        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)  # for these steps only: other cells and decode keep torch's setting
        try:
            return {"ms_per_step": bench_preset(preset, "cpu", steps=steps, warmup=2)["ms_per_step"], "steps": steps}
        finally:
            torch.set_num_threads(before)


CUDA_WARMUP = 5  # steps before timing (and before the capture of a graph)
CUDA_BATCHES = 8  # distinct batches cycled through while timing
CHUNK_SECONDS = 0.05  # steps between two syncs: enough that one sync's latency does not count


def time_cuda_steps(step, batches: list, budget: Budget) -> tuple[float, int]:
    """(median ms per step over chunks of ~CHUNK_SECONDS of steps, steps timed). The first chunk, one
    step, only sizes the chunks."""
    samples, steps, chunk, i = [], 0, 1, 0
    started = time.perf_counter()
    while steps < budget.steps or time.perf_counter() - started < budget.seconds or not samples:
        t = time.perf_counter()
        for _ in range(chunk):
            step(*batches[i % len(batches)])
            i += 1
        torch.cuda.synchronize()
        per_step = (time.perf_counter() - t) / chunk
        if i > 1:
            samples.append(per_step * 1e3)
            steps += chunk
        chunk = max(1, round(CHUNK_SECONDS / per_step))
    return statistics.median(samples), steps


class PyTorchCUDA(Backend):
    family = "PyTorch CUDA"
    LABELS = {"eager": "eager", "cudagraph": "graph", "cudagraph+compile": "graph + compile"}
    KEYS = {"eager": "eager", "cudagraph": "graph", "cudagraph+compile": "graph-compile"}

    def __init__(self, mode: str):
        self.mode = mode
        self.key = f"pytorch-cuda-{self.KEYS[mode]}"
        self.label = f"PyTorch CUDA {self.LABELS[mode]}"
        self.method = (f"bench/torch_cuda.py '{mode}', fp32 with TF32 off: median ms/step over chunks of "
                       f"~{CHUNK_SECONDS * 1e3:.0f} ms of steps (one sync each), after {CUDA_WARMUP} warm-up steps; "
                       "setup_s (compilation, warm-up, graph capture) apart")

    def start(self, stack):
        if not torch.cuda.is_available():
            raise Unavailable(f"no CUDA GPU (torch {torch.__version__})")
        from .torch_cuda import fp32_only

        fp32_only()

    def measure(self, preset, budget, estimate_ms):
        from .torch_cuda import cuda_step, preset_batches

        batches = preset_batches(preset, CUDA_WARMUP + CUDA_BATCHES)
        try:
            ready = cuda_step(preset, self.mode, batches[:CUDA_WARMUP])
            ms, steps = time_cuda_steps(ready.step, batches[CUDA_WARMUP:], budget)
            return {"ms_per_step": ms, "steps": steps, "setup_s": ready.setup_s}
        finally:  # the next cell (maybe a bigger model) gets the memory back
            ready = batches = None
            gc.collect()
            torch.cuda.empty_cache()


class Native(Backend):
    family = "C++ native"
    method = ("bench/cpu/native.py bench_step_native (the C API of build/native/libtinygpt.so): "
              "median over at least 3 steps and --seconds of them, after 2 warm-up steps")

    def __init__(self, threads: int):
        self.threads = threads
        self.key = f"native-{threads}t"
        self.label = f"C++ native, {threads} thread{'s' * (threads > 1)}"

    def start(self, stack):
        self.lib = build_dir() / "native" / "libtinygpt.so"
        if not self.lib.exists():
            raise Unavailable(f"{self.lib} is missing: run `make build`")
        from bench.cpu.native import bench_step_native, load_corpus

        self.bench_step, self.corpus = bench_step_native, load_corpus()

    def measure(self, preset, budget, estimate_ms):
        return {"ms_per_step": 1e3 * self.bench_step(self.lib, preset, self.threads, budget.seconds, self.corpus),
                "steps": None}


def wasm_builds() -> list[dict]:
    """wasm/builds.json's builds (carried by the wheel too)."""
    return json.loads((ROOT / "wasm" / "builds.json").read_text())["builds"]
