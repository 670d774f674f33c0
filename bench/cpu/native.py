"""Native CPU benchmark, one invocation on one machine (a benchmark, not a test):

  python -m bench.cpu.native [--presets tiny,small,medium,large,xl] [--threads N]
                                    [--part step,matmul] [--seconds S]

step   ms/step and tokens/s of a full training step (forward, backward, clip, AdamW) per preset:
       PyTorch CPU eager with N threads (bench.torch_step.bench_preset: mean over its timed steps),
       the native C++ core through its C API (build/native/libtinygpt.so: 1 thread and N threads).
matmul GFLOP/s of the step's Linear-layer products alone (forward + dinp + dweight + dbias, the shapes
       of the preset, counted as many times as the model runs them): torch.mm on preallocated
       outputs (N threads) vs wasm/src/matmul.cpp (1 and N threads).
pool   the thread pool's fork-join overhead per parallel_for.
shapes GFLOP/s per distinct Linear shape and product (forward, dinp, dweight), torch and native at
       1 and N threads: where the matmul is weak.

N defaults to every core (os.cpu_count()). Preset numbers come from site/static/presets.json. Each
figure is the median (--stat min: the minimum) over repeated timings after a warm-up; the header
names the CPU and the SIMD back end. Run it under `flock /tmp/tinygpt-bench.lock` on a shared machine.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bench.machine import cpu_model
from python_ref.config import model_config, presets_file, train_config
from bench.cpu.matmul_lib import MatmulLib
from scripts.api_ctypes import Binding

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PRESETS = "tiny,small,medium,large,xl"


STAT = statistics.median  # --stat min: the least-disturbed run, for a machine shared with others


def timed(fn, seconds: float, min_reps: int = 3, warmup: int = 1) -> float:
    """Median (or min) seconds per call of fn() over at least min_reps calls and ~`seconds` of work."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return STAT(times)


# ---- the Linear layers of one training step -----------------------------------------------------

def linear_shapes(preset: str) -> list[tuple[int, int, int, int]]:
    """(M, K, N, times per step) of every Linear product: per block q, k, v, o (C->C), fc_in (C->4C),
    fc_out (4C->C); the tied head (C->vocab) once. M = batch * ctx rows."""
    cfg, train_cfg = model_config(preset), train_config(preset)
    M, C, L = train_cfg.batch * cfg.ctx, cfg.dModel, cfg.nLayer
    return [(M, C, C, 4 * L), (M, C, 4 * C, L), (M, 4 * C, C, L), (M, C, cfg.vocabSize, 1)]


def linear_flops(shapes) -> float:
    return sum(3 * 2 * M * K * N * n for M, K, N, n in shapes)  # forward + two backward products


def bench_matmul_torch(shapes, threads: int, seconds: float) -> float:
    torch.set_num_threads(threads)
    total = 0.0
    for M, K, N, n in shapes:
        g = torch.Generator().manual_seed(0)
        x, w, b = torch.randn(M, K, generator=g), torch.randn(N, K, generator=g), torch.randn(N, generator=g)
        d = torch.randn(M, N, generator=g)
        out, dx, dw, db = torch.empty(M, N), torch.empty(M, K), torch.empty(N, K), torch.empty(N)

        def step():
            torch.addmm(b, x, w.t(), out=out)
            torch.mm(d, w, out=dx)
            torch.mm(d.t(), x, out=dw)
            torch.sum(d, 0, out=db)

        total += n * timed(step, seconds / len(shapes))
    return total


def bench_matmul_native(lib: MatmulLib, shapes, threads: int, seconds: float) -> float:
    total = 0.0
    with lib.pool(threads) as pool:
        for M, K, N, n in shapes:
            rng = np.random.default_rng(0)
            x, w = rng.standard_normal((M, K), np.float32), rng.standard_normal((N, K), np.float32)
            b, d = rng.standard_normal(N, np.float32), rng.standard_normal((M, N), np.float32)
            out, dx = np.empty((M, N), np.float32), np.zeros((M, K), np.float32)
            dw, db = np.zeros((N, K), np.float32), np.zeros(N, np.float32)
            reps = 8  # several calls per timing: no Python overhead between products
            total += n * timed(lambda: lib.repeat_step(pool, reps, out, x, w, b, dx, dw, db, d),
                               seconds / len(shapes)) / reps
    return total


def product_calls(lib, pool, M, K, N, threads):
    """{product: (torch callable, native callable)} for one Linear shape."""
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(M, K, generator=g), torch.randn(N, K, generator=g), torch.randn(N, generator=g)
    d = torch.randn(M, N, generator=g)
    out, dx, dw = torch.empty(M, N), torch.zeros(M, K), torch.zeros(N, K)
    xn, wn, bn, dn = x.numpy(), w.numpy(), b.numpy(), d.numpy()
    outn, dxn, dwn = out.numpy(), dx.numpy(), dw.numpy()
    return {
        "forward": (lambda: torch.addmm(b, x, w.t(), out=out),
                    lambda: lib.forward(pool, outn, xn, wn, bn)),
        "dinp": (lambda: torch.mm(d, w, out=dx),
                 lambda: lib.backward(pool, dxn, None, None, dn, xn, wn)),
        "dweight": (lambda: torch.mm(d.t(), x, out=dw),
                    lambda: lib.backward(pool, None, dwn, None, dn, xn, wn)),
    }


def bench_shapes(lib: MatmulLib, presets, threads: int, seconds: float):
    counts = sorted({1, threads})
    print("| preset | M,K,N | product | " + " | ".join(f"torch {t}T | native {t}T" for t in counts) + " |")
    print("|---|---|---|" + "---:|---:|" * len(counts))
    for p in presets:
        for M, K, N, _ in linear_shapes(p):
            flops = 2 * M * K * N
            rates = {}
            for t in counts:
                torch.set_num_threads(t)
                with lib.pool(t) as pool:
                    for name, (ft, fn) in product_calls(lib, pool, M, K, N, t).items():
                        rates[name, "torch", t] = flops / timed(ft, seconds / 6, min_reps=5) / 1e9
                        rates[name, "native", t] = flops / timed(fn, seconds / 6, min_reps=5) / 1e9
            for name in ("forward", "dinp", "dweight"):
                cells = " | ".join(f"{rates[name, who, t]:.0f}" for t in counts for who in ("torch", "native"))
                print(f"| {p} | {M},{K},{N} | {name} | {cells} |", flush=True)


# ---- full training steps -------------------------------------------------------------------------

def bench_step_torch(preset: str, threads: int, seconds: float) -> float:
    """Seconds per PyTorch training step: bench.torch_step.bench_preset (what `tinygpt bench` runs:
    the preset's real batches, mean over the timed steps) when it exists, else our own loop."""
    torch.set_num_threads(threads)
    try:
        from bench.torch_step import bench_preset
    except ImportError:
        bench_preset = None
    if bench_preset is not None:
        probe = bench_preset(preset, "cpu", steps=1, warmup=1)["ms_per_step"] / 1e3
        steps = max(3, int(seconds / max(probe, 1e-4)))
        return bench_preset(preset, "cpu", steps=steps, warmup=2)["ms_per_step"] / 1e3

    from python_ref.model import TinyGPT
    from python_ref.train import make_optimizer, train_step

    cfg, train_cfg = model_config(preset), train_config(preset)
    model = TinyGPT(cfg, seed=train_cfg.seed)
    opt = make_optimizer(model, train_cfg)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocabSize, (train_cfg.batch, cfg.ctx), generator=g)
    y = torch.randint(0, cfg.vocabSize, (train_cfg.batch, cfg.ctx), generator=g)
    return timed(lambda: train_step(model, opt, x, y, train_cfg.gradClip), seconds, warmup=2)


class NativeModel:
    """The C++ core through wasm/src/tinygpt_api.h (build/native/libtinygpt.so, built by `make`), with
    the ctypes signatures generated from the header (scripts/api_ctypes.py)."""

    def __init__(self, lib_path: Path, preset: str, threads: int, corpus: bytes):
        binding = Binding(lib_path)
        lib = self.lib = binding.lib
        cfg, train_cfg = model_config(preset), train_config(preset)
        config = binding.struct("tg_config", cfg.to_json() | {"initStd": presets_file()["model"]["initStd"]})
        self.handle = lib.tg_create(ctypes.byref(config), train_cfg.batch, threads)
        if not self.handle:
            raise RuntimeError(lib.tg_last_error().decode())
        self.threads = lib.tg_n_threads(self.handle)
        self.check(lib.tg_init(self.handle, train_cfg.seed))
        t = train_cfg
        self.check(lib.tg_set_hyper(self.handle, t.lr, t.beta1, t.beta2, t.eps, t.weightDecay, t.gradClip))
        self.check(lib.tg_set_corpus(self.handle, corpus, len(corpus), train_cfg.valFraction))

    def check(self, code):
        if code < 0:
            raise RuntimeError(self.lib.tg_last_error().decode())

    def step(self):
        self.check(self.lib.tg_train_step(self.handle))

    def close(self):
        self.lib.tg_destroy(self.handle)


def bench_step_native(lib_path: Path, preset: str, threads: int, seconds: float, corpus: bytes) -> float:
    model = NativeModel(lib_path, preset, threads, corpus)
    try:
        return timed(model.step, seconds, warmup=2)
    finally:
        model.close()


def load_corpus() -> bytes:
    for p in (ROOT / "site/static/data/tinyshakespeare.txt", ROOT.parent / "shared/data/tinyshakespeare.txt"):
        if p.exists():
            return p.read_bytes()
    raise SystemExit("no corpus found (site/static/data/tinyshakespeare.txt)")


# ---- report --------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default=DEFAULT_PRESETS)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the 'all cores' count")
    ap.add_argument("--part", default="step,matmul", help="step, matmul, shapes, pool (comma-separated)")
    ap.add_argument("--seconds", type=float, default=2.0, help="timing budget per measurement")
    ap.add_argument("--lib", default=None, help="libtinygpt.so (default $TINYGPT_BUILD/native/libtinygpt.so)")
    ap.add_argument("--variant", default="native", help="matmul build: native, avx2, portable")
    ap.add_argument("--stat", default="median", choices=["median", "min"], help="statistic over repeated timings")
    args = ap.parse_args(argv)
    global STAT
    STAT = {"median": statistics.median, "min": min}[args.stat]
    presets, parts, T = args.presets.split(","), args.part.split(","), args.threads
    build = Path(os.environ.get("TINYGPT_BUILD", ROOT / "build"))
    lib_path = Path(args.lib) if args.lib else build / "native" / "libtinygpt.so"
    mm = MatmulLib(args.variant)

    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; native SIMD back end: {mm.simd}; "
          f"PyTorch {torch.__version__}; all cores = {T} threads")
    print(f"command: python -m bench.cpu.native --presets {args.presets} --threads {T} "
          f"--part {args.part} --seconds {args.seconds} --stat {args.stat}")

    if "step" in parts:
        have_native = lib_path.exists()
        if not have_native:
            print(f"(no {lib_path}: native step columns skipped; run `make build` first)")
        corpus = load_corpus() if have_native else b""
        print(f"\nTraining step (forward + backward + clip + AdamW), ms/step (native: {args.stat}; "
              f"PyTorch: bench.torch_step.bench_preset's mean) and tokens/s:")
        print(f"| preset | tokens/step | PyTorch {T}T ms | native 1T ms | native {T}T ms | "
              f"native {T}T / PyTorch | native {T}T / 1T | PyTorch tok/s | native {T}T tok/s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p in presets:
            train_cfg, cfg = train_config(p), model_config(p)
            tokens = train_cfg.batch * cfg.ctx
            t_torch = bench_step_torch(p, T, args.seconds)
            if have_native:
                t1 = bench_step_native(lib_path, p, 1, args.seconds, corpus)
                tn = bench_step_native(lib_path, p, T, args.seconds, corpus)
                print(f"| {p} | {tokens} | {t_torch * 1e3:.1f} | {t1 * 1e3:.1f} | {tn * 1e3:.1f} | "
                      f"{t_torch / tn:.2f}x | {t1 / tn:.2f}x | {tokens / t_torch:,.0f} | {tokens / tn:,.0f} |",
                      flush=True)
            else:
                print(f"| {p} | {tokens} | {t_torch * 1e3:.1f} | - | - | - | - | {tokens / t_torch:,.0f} | - |",
                      flush=True)

    if "pool" in parts:
        for t in sorted({1, T}):
            with mm.pool(t) as pool:
                mm.pool_roundtrip(pool, 2, 1000)
                us = min(mm.pool_roundtrip(pool, 2, 20000) for _ in range(3)) * 1e6
            print(f"thread pool, {t} thread(s): {us:.2f} us per parallel_for (fork + join, trivial work)")

    if "shapes" in parts:
        print(f"\nPer Linear shape and product, GFLOP/s ({args.stat} time):")
        bench_shapes(mm, presets, T, args.seconds)

    if "matmul" in parts:
        print("\nLinear layers of one step (forward + dinp + dweight + dbias), ms and GFLOP/s:")
        print(f"| preset | GFLOP | torch.mm {T}T ms | native 1T ms | native {T}T ms | "
              f"torch {T}T GFLOP/s | native 1T GFLOP/s | native {T}T GFLOP/s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for p in presets:
            shapes = linear_shapes(p)
            flops = linear_flops(shapes)
            tt = bench_matmul_torch(shapes, T, args.seconds)
            t1 = bench_matmul_native(mm, shapes, 1, args.seconds)
            tn = bench_matmul_native(mm, shapes, T, args.seconds)
            print(f"| {p} | {flops / 1e9:.2f} | {tt * 1e3:.1f} | {t1 * 1e3:.1f} | {tn * 1e3:.1f} | "
                  f"{flops / tt / 1e9:.0f} | {flops / t1 / 1e9:.0f} | {flops / tn / 1e9:.0f} |", flush=True)


if __name__ == "__main__":
    main()
