"""Where PyTorch's best fp32 step spends its GPU time, per preset: the CUDA kernels of one step of
python_ref's CUDA graph + torch.compile form (python_ref/bench_cuda.py; fp32, TF32 off), grouped by
what they do, so that each group can be set beside the WGSL trainer's (bench.mjs --profile).

python webgpu/bench/torch_profile.py --presets large,xl --steps 10 > torch_profile.json
"""
import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from python_ref.bench_cuda import fp32_only, preset_batches, static_step  # noqa: E402

# (group, substrings of a kernel's name), first match wins. cuBLAS's split-K reductions and the sums
# that make Linear bias gradients (at::native::reduce_kernel) count as matmul: the WGSL products do both.
GROUPS = [
    ("attention", ("fmha", "flash", "attention", "attn")),
    ("matmul", ("gemm", "cutlass", "xmma", "cublas", "splitk", "reduce_kernel<")),
    ("adamw and clip", ("adam", "multi_tensor", "foreach", "lpnorm")),
    ("fused elementwise (triton)", ("triton",)),
]


def group_of(name: str) -> str:
    lowered = name.lower()
    for group, keys in GROUPS:
        if any(k in lowered for k in keys):
            return group
    return "other"


def kernels_per_step(preset: str, steps: int, warmup: int) -> dict:
    """Each CUDA kernel's GPU time per step (µs) over `steps` graph replays, and the groups' sums."""
    batches = preset_batches(preset, warmup + steps)
    ready = static_step(preset, batches[:warmup], compiled=True, graph=True)
    for x, y in batches[:warmup]:
        ready.step(x, y)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for x, y in batches[warmup:]:
            ready.step(x, y)
        torch.cuda.synchronize()
    totals, counts = defaultdict(float), defaultdict(int)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset")):
            totals[e.name] += e.device_time_total / steps
            counts[e.name] += 1
    groups = defaultdict(float)
    for name, us in totals.items():
        groups[group_of(name)] += us
    rows = sorted(({"name": n, "group": group_of(n), "per_step": counts[n] / steps, "us": round(us, 2)}
                   for n, us in totals.items()), key=lambda r: -r["us"])
    return {"preset": preset, "kernels_per_step": sum(counts.values()) / steps,
            "gpu_us_per_step": round(sum(totals.values()), 1),
            "groups_us": {g: round(us, 1) for g, us in sorted(groups.items(), key=lambda kv: -kv[1])}, "kernels": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="medium,large,xl,huge,massive")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    fp32_only()
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "mode": "cudagraph+compile",
           "tf32": False, "presets": []}
    for name in args.presets.split(","):
        r = kernels_per_step(name, args.steps, args.warmup)
        out["presets"].append(r)
        print(f"{name}: {r['kernels_per_step']:.0f} kernels, {r['gpu_us_per_step']:.0f} µs of GPU time per step: "
              + ", ".join(f"{g} {us:.0f}" for g, us in r["groups_us"].items()), file=sys.stderr)
        for k in r["kernels"][:12]:
            print(f"    {k['name'][:90]:90} {k['per_step']:5.1f} × = {k['us']:8.1f} µs", file=sys.stderr)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
