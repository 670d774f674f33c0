"""The PyTorch side of the comparison, on the same GPU: python_ref's fp32 training step per preset in
each mode, and cuBLAS fp32 (TF32 off) matmul GFLOP/s.

Modes (fp32, TF32 off; the same model code, presets and batches):
  eager              python_ref.bench.bench_preset: the step `tinygpt train` takes (one host sync per step)
  compile            torch.compile(model), otherwise eager
  cudagraph          one torch.cuda.CUDAGraph of forward + backward + clip + AdamW(fused, capturable),
                     replayed per step with the batch copied into its static inputs
  cudagraph+compile  the same graph around torch.compile(model)
Compile time is reported apart from step time. Each graph mode's losses are checked against eager.

python webgpu/bench/torch_bench.py --presets small,medium --modes eager,cudagraph --steps 30 --warmup 5
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from python_ref.bench import bench_preset  # noqa: E402
from python_ref.config import DEFAULT_CORPUS, model_config, train_config  # noqa: E402
from python_ref.data import BatchStream, Corpus  # noqa: E402
from python_ref.model import TinyGPT  # noqa: E402

MODES = ("eager", "compile", "cudagraph", "cudagraph+compile")


def cublas_fp32(n: int, reps: int) -> float:
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


def graph_mode(preset: str, steps: int, warmup: int, compiled: bool, graph: bool) -> dict:
    """ms/step of one mode; losses of every step, for the check against eager."""
    config, cfg = model_config(preset), train_config(preset)
    train, _ = Corpus.from_file(DEFAULT_CORPUS).split(cfg.valFraction, config.ctx)
    stream = BatchStream(train, config.ctx, cfg.batch, cfg.seed)
    batches = [tuple(torch.from_numpy(a).cuda() for a in stream.next()) for _ in range(warmup + steps)]
    model = TinyGPT(config, cfg.seed).cuda()
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weightDecay},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=True, capturable=graph)
    forward = torch.compile(model) if compiled else model
    x_in, y_in = (torch.empty_like(t) for t in batches[0])

    def step():
        optimizer.zero_grad(set_to_none=False)
        _, loss = forward(x_in, y_in)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.gradClip)
        optimizer.step()
        return loss.detach()

    losses = []
    started = time.perf_counter()
    if graph:
        # warm-up steps on a side stream (as CUDA graph capture requires), then one capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for x, y in batches[:warmup]:
                x_in.copy_(x), y_in.copy_(y)
                losses.append(step().clone())
        torch.cuda.current_stream().wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            loss_out = step()

        def run():
            captured.replay()
            return loss_out.clone()
    else:
        for x, y in batches[:warmup]:
            x_in.copy_(x), y_in.copy_(y)
            losses.append(step())
        run = step
    torch.cuda.synchronize()
    setup_s = time.perf_counter() - started
    start = time.perf_counter()
    for x, y in batches[warmup:]:
        x_in.copy_(x), y_in.copy_(y)
        losses.append(run())
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) / steps * 1e3
    tokens = cfg.batch * config.ctx
    return {"preset": preset, "ms_per_step": round(ms, 3), "tokens_per_s": round(tokens / ms * 1e3, 1),
            "setup_s": round(setup_s, 2), "losses": [float(v) for v in torch.stack(losses).cpu()]}


def eager_losses(preset: str, n: int) -> list[float]:
    """The first n losses of the eager step (the reference every mode is checked against)."""
    return graph_mode(preset, n, 0, compiled=False, graph=False)["losses"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="small,medium,large,xl,huge,massive")
    ap.add_argument("--modes", default="eager,cudagraph", help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sizes", default="1024,2048,4096")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
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
                r = graph_mode(name, args.steps, args.warmup, compiled="compile" in mode, graph="cudagraph" in mode)
                r["max_rel_loss_diff_vs_eager"] = max(abs(a - b) / abs(b) for a, b in zip(r.pop("losses"), reference))
            out["modes"][mode].append({"preset": name, "ms_per_step": r["ms_per_step"],
                                       "tokens_per_s": r["tokens_per_s"], **{k: r[k] for k in
                                       ("setup_s", "max_rel_loss_diff_vs_eager") if k in r}})
            print(name, mode, out["modes"][mode][-1], file=sys.stderr)
    for n in map(int, args.sizes.split(",")):
        out["matmul"].append({"n": n, "gflops": cublas_fp32(n, 20)})
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
