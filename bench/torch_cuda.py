"""python_ref's fp32 training step on one CUDA GPU in the forms a benchmark compares (TF32 off; the same
model code, presets and batches):

  eager              python_ref.train.train_step: the step `tinygpt train` takes (one host sync per step)
  compile            torch.compile(model), otherwise eager
  cudagraph          one torch.cuda.CUDAGraph of forward + backward + clip + AdamW(fused, capturable),
                     replayed per step with the batch copied into its static inputs
  cudagraph+compile  the same graph around torch.compile(model)

Shared by `tinygpt bench --all` (bench/all.py) and bench/gpu_machine/torch_bench.py. The time a
step form takes to be ready (compilation, warm-up, graph capture) is kept apart from its step time.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from python_ref.config import DEFAULT_CORPUS, model_config, train_config
from python_ref.data import BatchStream, Corpus
from python_ref.model import TinyGPT
from python_ref.train import make_optimizer, train_step

MODES = ("eager", "compile", "cudagraph", "cudagraph+compile")


def fp32_only() -> None:
    """The comparison is fp32: TF32 would run the matmuls at a lower precision than every other engine."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # inductor suggests TF32 on every compile: off is the point here
    warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")


def preset_batches(preset: str, n: int, device: str = "cuda") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The preset's first n real batches of the default corpus, on the device."""
    config, train_cfg = model_config(preset), train_config(preset)
    train, _ = Corpus.from_file(DEFAULT_CORPUS).split(train_cfg.valFraction, config.ctx)
    stream = BatchStream(train, config.ctx, train_cfg.batch, train_cfg.seed)
    return [tuple(torch.from_numpy(a).to(device) for a in stream.next()) for _ in range(n)]


@dataclass
class CudaStep:
    """One form of the training step, ready to time: step(x, y) trains on one batch and returns its loss
    (a tensor on the GPU, except eager's float); setup_s is what getting ready took, warm-up included."""
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor | float]
    setup_s: float
    warmup_losses: list


def cuda_step(preset: str, mode: str, warmup_batches: list) -> CudaStep:
    """The step of `mode` (one of MODES) for a fresh model of the preset, after the warm-up batches."""
    if mode == "eager":
        return _eager_step(preset, warmup_batches)
    return static_step(preset, warmup_batches, compiled="compile" in mode, graph="cudagraph" in mode)


def _eager_step(preset: str, warmup_batches: list) -> CudaStep:
    train_cfg = train_config(preset)
    started = time.perf_counter()
    model = TinyGPT(model_config(preset), train_cfg.seed).cuda()
    optimizer = make_optimizer(model, train_cfg)

    def step(x, y):
        return train_step(model, optimizer, x, y, train_cfg.gradClip)

    losses = [step(x, y) for x, y in warmup_batches]
    torch.cuda.synchronize()
    return CudaStep(step, time.perf_counter() - started, losses)


# Losses a graphed step keeps before its ring wraps (a caller reads them before then, or not at all).
LOSS_RING = 4096


def static_step(preset: str, warmup_batches: list, compiled: bool, graph: bool) -> CudaStep:
    """The step on static input tensors, with fused AdamW (capturable when graphed), as a CUDA graph
    needs it; without graph and compile it is the reference the graphed forms are checked against."""
    config, train_cfg = model_config(preset), train_config(preset)
    started = time.perf_counter()
    model = TinyGPT(config, train_cfg.seed).cuda()
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": train_cfg.weightDecay},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=train_cfg.lr, betas=(train_cfg.beta1, train_cfg.beta2), eps=train_cfg.eps, fused=True, capturable=graph)
    forward = torch.compile(model) if compiled else model
    # the graph reads its batch from these (x, y: int64 (B, T), as BatchStream makes them)
    x_in, y_in = (torch.empty((train_cfg.batch, config.ctx), dtype=torch.int64, device="cuda") for _ in range(2))

    def one_step():
        optimizer.zero_grad(set_to_none=False)
        _, loss = forward(x_in, y_in)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, train_cfg.gradClip)
        optimizer.step()
        return loss.detach()

    losses = []
    if graph:
        # warm-up steps on a side stream (as CUDA graph capture requires), then one capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for x, y in warmup_batches:
                x_in.copy_(x), y_in.copy_(y)
                losses.append(one_step().clone())
        torch.cuda.current_stream().wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            loss_out = one_step()
        # Nothing is allocated between replays: each loss is copied into a ring made now. Cloning the
        # loss after each replay (a 4-byte allocation) corrupted the training the graph replays,
        # the same way every run (H100, torch 2.11: small's loss 4.90 -> 6.0 over 20 replays, where
        # eager went to 4.27); with the ring the replayed losses equal eager's (small, 25 steps).
        ring = torch.zeros(LOSS_RING, device="cuda")
        replays = 0

        def run():
            nonlocal replays
            captured.replay()
            slot = ring[replays % LOSS_RING]
            slot.copy_(loss_out)
            replays += 1
            return slot
    else:
        for x, y in warmup_batches:
            x_in.copy_(x), y_in.copy_(y)
            losses.append(one_step())
        run = one_step
    torch.cuda.synchronize()

    def step(x, y):
        x_in.copy_(x), y_in.copy_(y)
        return run()

    return CudaStep(step, time.perf_counter() - started, losses)


def cublas_fp32_gflops(n: int, reps: int) -> float:
    """GFLOP/s of an n×n by n×nᵀ fp32 product (TF32 as set by the caller)."""
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
