"""The PyTorch side of the comparison, on the same GPU: python_ref's CUDA eager fp32 training step
(python_ref.bench.bench_preset) per preset, and cuBLAS fp32 (TF32 off) matmul GFLOP/s.

python webgpu/bench/torch_bench.py --presets small,medium --steps 30 --warmup 5 --sizes 1024,2048,4096
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from python_ref.bench import bench_preset  # noqa: E402


def cublas_fp32(n: int, reps: int) -> float:
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    for _ in range(3):
        a @ b.t()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b.t()
    torch.cuda.synchronize()
    return 2 * n**3 / ((time.perf_counter() - t) / reps) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="small,medium,large,xl,huge,massive")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sizes", default="1024,2048,4096")
    args = ap.parse_args()
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "presets": [], "matmul": []}
    for name in args.presets.split(","):
        r = bench_preset(name, "cuda", args.steps, args.warmup)
        out["presets"].append(r)
        print(name, r, file=sys.stderr)
    for n in map(int, args.sizes.split(",")):
        out["matmul"].append({"n": n, "gflops": cublas_fp32(n, 20)})
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
