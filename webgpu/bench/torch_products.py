"""cuBLAS fp32 (TF32 off) on the very products the WGSL tile bench timed, the same way: for each
product of matmul_tiles.mjs's JSON, reps back-to-back products (each as a Linear computes it: the
forward x·Wᵀ, the input gradient dy·W, the weight gradient dyᵀ·x) in one CUDA graph, µs per product
from the difference between reps and one. Prints, per preset, each product's WGSL time (the tile
the trainer takes, and the best tile) beside cuBLAS's, and their totals over a step; and the floor,
a 4×4×4 product, on both sides (what a dependent launch costs with no work to do).

python webgpu/bench/torch_products.py matmul_tiles.json > torch_products.json
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from python_ref.bench_cuda import fp32_only  # noqa: E402
from webgpu.bench.torch_bench import raise_clocks  # noqa: E402


def operands(form: str, M: int, N: int, K: int):
    """A function computing the product into its output, as a Linear's forward or backward does."""
    r = lambda *shape: torch.randn(*shape, device="cuda")  # noqa: E731
    out = torch.empty(M, N, device="cuda")
    if form == "forward":
        a, w = r(M, K), r(N, K)
        return lambda: torch.mm(a, w.t(), out=out)
    if form == "backward_input":
        a, w = r(M, K), r(K, N)
        return lambda: torch.mm(a, w, out=out)
    a, b = r(K, M), r(K, N)  # backward_weight: dW = dyᵀ·x (the bias gradient's sum is not timed)
    return lambda: torch.mm(a.t(), b, out=out)


def graph_of(fn, reps: int) -> torch.cuda.CUDAGraph:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    return g


def replay_us(g: torch.cuda.CUDAGraph, tries: int = 5) -> float:
    """The fastest of `tries` replays, in µs."""
    best = float("inf")
    for _ in range(tries):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3)
    return best


def product_us(form: str, M: int, N: int, K: int, reps: int = 30) -> float:
    fn = operands(form, M, N, K)
    one, many = graph_of(fn, 1), graph_of(fn, reps)
    return (replay_us(many) - replay_us(one)) / (reps - 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tiles", help="matmul_tiles.mjs --out JSON")
    args = ap.parse_args()
    fp32_only()
    busy = torch.randn(2048, 2048, device="cuda"), torch.empty(2048, 2048, device="cuda")
    data = json.loads(Path(args.tiles).read_text())
    rows = [r for r in data if "preset" in r]
    out, preset = [], None
    for r in data:
        if r.get("floor"):
            raise_clocks(*busy)
            us = product_us("forward", 4, 4, 4)
            out.append({"floor": True, "cublas_us": round(us, 2), "wgsl_us": round(r["us"], 2)})
            print(f"floor (4x4x4 product): cuBLAS {us:.1f} us, WGSL {r['us']:.1f} us", file=sys.stderr)
    for r in rows:
        if r["preset"] != preset:
            preset = r["preset"]
            raise_clocks(*busy)
        us = product_us(r["form"], r["M"], r["N"], r["K"])
        best = r["results"][0]
        out.append({k: r[k] for k in ("preset", "form", "M", "N", "K", "count")} |
                   {"cublas_us": round(us, 2), "wgsl_us": round(r["chosen"]["us"], 2), "wgsl_tile": r["chosen"]["tile"],
                    "best_us": round(best["us"], 2), "best_tile": best["tile"]})
        o = out[-1]
        print(f"{preset} {o['form']} {o['M']}x{o['N']}x{o['K']} ×{o['count']}: cuBLAS {us:.1f} us, "
              f"WGSL {o['wgsl_us']:.1f} ({o['wgsl_tile']}), best {o['best_us']:.1f} ({o['best_tile']}), "
              f"ratio {o['wgsl_us'] / us:.2f}", file=sys.stderr)
    for p in dict.fromkeys(o["preset"] for o in out if "preset" in o):
        total = lambda key: sum(o[key] * o["count"] for o in out if o.get("preset") == p) / 1e3  # noqa: E731
        print(f"{p}: per step cuBLAS {total('cublas_us'):.2f} ms, WGSL {total('wgsl_us'):.2f} ms as chosen, "
              f"{total('best_us'):.2f} ms with the best tile each", file=sys.stderr)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
