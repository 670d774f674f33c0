"""The PyTorch side of the comparison, on the same GPU: python_ref's fp32 training step per preset in
each mode, and cuBLAS fp32 (TF32 off) matmul GFLOP/s.

Modes (fp32, TF32 off; the same model code, presets and batches; the step code is
bench/torch_cuda.py, which `tinygpt bench --all` times too):
  eager              bench.torch_step.bench_preset: the step `tinygpt train` takes (one host sync per step)
  compile            torch.compile(model), otherwise eager
  cudagraph          one torch.cuda.CUDAGraph of forward + backward + clip + AdamW(fused, capturable),
                     replayed per step with the batch copied into its static inputs
  cudagraph+compile  the same graph around torch.compile(model)
Compile time is reported apart from step time. Each graph mode's losses are checked against eager.
With --blocks N the graph modes time their steps in N blocks, as bench.mjs does, and report the median
block beside the mean.

python bench/gpu_machine/torch_bench.py --presets small,medium --modes eager,cudagraph --steps 30 --warmup 5
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.torch_step import bench_preset  # noqa: E402
from bench.torch_cuda import LOSS_RING, MODES, cublas_fp32_gflops, fp32_only, preset_batches, static_step  # noqa: E402
from python_ref.config import model_config, train_config  # noqa: E402


def raise_clocks(a: torch.Tensor, b: torch.Tensor, seconds: float = 0.3) -> None:
    """Keeps the GPU busy for `seconds` with products b = a·a: while the host compiles and captures a
    step the GPU idles and may lower its clocks, and the first steps timed after that ran slower (as
    the WGSL bench found; bench.mjs does the same before each preset). a and b are allocated before
    the capture: an allocation between a graph's replays corrupted its training at massive (loss 0.47
    relative off eager's), as cloning each loss did before the loss ring."""
    end = time.perf_counter() + seconds
    while True:
        for _ in range(10):
            torch.mm(a, a, out=b)
        torch.cuda.synchronize()
        if time.perf_counter() >= end:
            return


def graph_mode(preset: str, steps: int, warmup: int, compiled: bool, graph: bool, blocks: int = 1) -> dict:
    """ms/step of one mode, the mean over `blocks` equal blocks of the steps (each synchronized before the
    next) and the median block's, as bench.mjs times the WGSL trainer; losses of every step, for the
    check against eager."""
    if steps % blocks:
        raise ValueError(f"--blocks {blocks}: a whole divisor of --steps {steps}")
    if warmup + steps > LOSS_RING:
        raise ValueError(f"at most {LOSS_RING} steps: a graphed step keeps that many losses")
    config, train_cfg = model_config(preset), train_config(preset)
    batches = preset_batches(preset, warmup + steps)
    busy = torch.randn(2048, 2048, device="cuda"), torch.empty(2048, 2048, device="cuda")
    raise_clocks(*busy, seconds=0)  # cuBLAS's lazily made workspace too, before the capture
    ready = static_step(preset, batches[:warmup], compiled, graph)
    losses = list(ready.warmup_losses)
    raise_clocks(*busy)
    block_ms, size = [], steps // blocks
    for b in range(blocks):
        start = time.perf_counter()
        for x, y in batches[warmup + b * size:warmup + (b + 1) * size]:
            losses.append(ready.step(x, y))
        torch.cuda.synchronize()
        block_ms.append((time.perf_counter() - start) / size * 1e3)
    ms = statistics.fmean(block_ms)
    tokens = train_cfg.batch * config.ctx
    return {"preset": preset, "ms_per_step": round(ms, 3), "tokens_per_s": round(tokens / ms * 1e3, 1),
            "median_block_ms": round(statistics.median_high(block_ms), 3), "setup_s": round(ready.setup_s, 2),
            "losses": [float(v) for v in torch.stack(losses).cpu()]}


def eager_losses(preset: str, n: int) -> list[float]:
    """The first n losses of the eager step (the reference every mode is checked against)."""
    return graph_mode(preset, n, 0, compiled=False, graph=False)["losses"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="small,medium,large,xl,huge,massive")
    ap.add_argument("--modes", default="eager,cudagraph", help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=1,
                    help="the graph modes' timed steps in this many blocks (bench.mjs --blocks)")
    ap.add_argument("--sizes", default="1024,2048,4096")
    args = ap.parse_args()
    fp32_only()
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        ap.error(f"unknown mode(s) {unknown}; choose from {MODES}")
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "tf32": False,
           "presets": [], "modes": {m: [] for m in modes}, "matmul": []}
    for name in args.presets.split(","):
        reference = eager_losses(name, args.warmup + args.steps)
        for mode in modes:
            if mode == "eager":
                r = bench_preset(name, "cuda", args.steps, args.warmup)
                out["presets"].append(r)  # the shape earlier runs wrote
            else:
                r = graph_mode(name, args.steps, args.warmup, compiled="compile" in mode, graph="cudagraph" in mode,
                               blocks=args.blocks)
                r["max_rel_loss_diff_vs_eager"] = max(abs(a - b) / abs(b) for a, b in zip(r.pop("losses"), reference))
            out["modes"][mode].append({"preset": name, "ms_per_step": r["ms_per_step"],
                                       "tokens_per_s": r["tokens_per_s"], **{k: r[k] for k in
                                       ("median_block_ms", "setup_s", "max_rel_loss_diff_vs_eager") if k in r}})
            print(name, mode, out["modes"][mode][-1], file=sys.stderr)
    for n in map(int, args.sizes.split(",")):
        out["matmul"].append({"n": n, "gflops": cublas_fp32_gflops(n, 20)})
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
