"""Parity on the adapter at hand: the WGSL trainer (bench/webgpu/train_node.mjs, Node + Dawn) against
python_ref, the same presets, initial weights and batches, step by step. On the GPU machine it runs
beside the benchmarks (run_device.sh; PARITY=0 skips it), so a speed-up there is also checked for what it
computes on a real GPU, not only on SwiftShader; python_ref runs on CUDA where there is one (fp32,
TF32 off), else on the CPU.

python bench/webgpu/parity.py --presets tiny,small --steps 50 [--node node] [--out parity.json]
Prints one line per preset; exits 1 when a loss differs from python_ref's by more than --bar (relative).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.torch_cuda import fp32_only, preset_batches  # noqa: E402
from python_ref.config import model_config, train_config  # noqa: E402
from python_ref.model import TinyGPT  # noqa: E402
from python_ref.train import make_optimizer, train_step  # noqa: E402


def reference_losses(preset: str, steps: int, device: str) -> list[float]:
    """python_ref's losses of the preset's first `steps` training steps."""
    train_cfg = train_config(preset)
    model = TinyGPT(model_config(preset), train_cfg.seed).to(device)
    optimizer = make_optimizer(model, train_cfg)
    return [train_step(model, optimizer, x, y, train_cfg.gradClip) for x, y in preset_batches(preset, steps, device)]


def wgsl_losses(preset: str, steps: int, node: str, defer: bool | None = None) -> dict:
    """{"adapter", "losses", "headDeferred"} of the WGSL trainer in Node; defer: its deferWeightGrads
    (None: the trainer's rule)."""
    job = json.dumps({"preset": preset, "steps": steps, **({} if defer is None else {"deferWeightGrads": defer})})
    r = subprocess.run([node, str(ROOT / "bench/webgpu/train_node.mjs")], input=job, capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="tiny,small,medium,large")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--bar", type=float, default=1e-3)
    ap.add_argument("--node", default="node")
    ap.add_argument("--out")
    ap.add_argument("--defer", choices=["on", "off"],
                    help="weight gradients deferred to the end of the backward or not (default: the trainer's rule)")
    args = ap.parse_args()
    defer = {"on": True, "off": False}.get(args.defer)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    fp32_only()
    rows, ok = [], True
    for preset in args.presets.split(","):
        wgsl = wgsl_losses(preset, args.steps, args.node, defer)
        ref = reference_losses(preset, args.steps, device)
        rel = [abs(a - b) / abs(b) for a, b in zip(wgsl["losses"], ref)]
        worst = max(range(len(rel)), key=rel.__getitem__)
        passed = len(wgsl["losses"]) == args.steps and rel[worst] <= args.bar
        ok &= passed
        rows.append({"preset": preset, "steps": args.steps, "adapter": wgsl["adapter"], "reference": device,
                     "maxRelativeDifference": rel[worst], "atStep": worst + 1, "firstLoss": ref[0], "lastLoss": ref[-1],
                     "headDeferred": wgsl["headDeferred"], "passed": passed})
        print(f"{preset}: {args.steps} steps, WGSL on {wgsl['adapter']} vs python_ref on {device}: losses "
              f"{ref[0]:.4f} -> {ref[-1]:.4f}, max relative difference {rel[worst]:.3g} at step {worst + 1} "
              f"(bar {args.bar:g}){'' if passed else ' FAILED'}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
