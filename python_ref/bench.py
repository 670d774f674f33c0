"""Training-step throughput per preset: ms/step, tokens/s and achieved GFLOP/s.

FLOPs per token = 6N + 12·L·C·T (N parameters, T = ctx): 6N for the matmuls of forward and
backward, 12·L·C·T for attention's scores and weighted sums. The C++ bench imports
bench_preset to compare its figures with PyTorch's on the same machine.
"""
from __future__ import annotations

import time

import torch

from .config import DEFAULT_CORPUS, ConfigError, ModelConfig, model_config, train_config
from .data import BatchStream, Corpus
from .model import TinyGPT
from .train import make_optimizer, resolve_device, train_step


def flops_per_token(config: ModelConfig) -> int:
    return 6 * config.param_count() + 12 * config.nLayer * config.dModel * config.ctx


# Dense peak FLOP/s by GPU name (vendor datasheets, no sparsity): fp32 is the CUDA-core rate, since
# PyTorch leaves TF32 off for matmuls by default; bf16 is the tensor-core rate. H200 has H100 SXM's compute.
PEAK_FLOPS = {  # name fragment: (fp32, bf16)
    "H100 PCIe": (51.2e12, 756e12),
    "H100": (66.9e12, 989.4e12),
    "H200": (66.9e12, 989.4e12),
    "A100": (19.5e12, 312e12),
}


def peak_flops(device: torch.device, bf16: bool) -> float | None:
    """The device's dense peak for the precision the matmuls run in, or None where it is not known."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for fragment, (fp32, half) in PEAK_FLOPS.items():
        if fragment in name:
            return half if bf16 else fp32
    return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def bench_preset(preset: str, device: str = "cpu", steps: int = 10, warmup: int = 2) -> dict:
    """Time `steps` full training steps (forward, backward, clip, AdamW) after `warmup` untimed ones.

    Batches are the preset's real batches of the default corpus, copied to the device before timing.
    """
    if steps <= 0 or warmup < 0:
        raise ConfigError(f"bench needs steps > 0 and warmup >= 0, got steps={steps}, warmup={warmup}")
    config = model_config(preset)
    cfg = train_config(preset)
    dev = resolve_device(device)
    train, _ = Corpus.from_file(DEFAULT_CORPUS).split(cfg.valFraction, config.ctx)
    stream = BatchStream(train, config.ctx, cfg.batch, cfg.seed)
    batches = [tuple(torch.from_numpy(a).to(dev) for a in stream.next()) for _ in range(warmup + steps)]
    model = TinyGPT(config, cfg.seed).to(dev)
    optimizer = make_optimizer(model, cfg)
    for x, y in batches[:warmup]:
        train_step(model, optimizer, x, y, cfg.gradClip)
    _sync(dev)
    start = time.perf_counter()
    for x, y in batches[warmup:]:
        train_step(model, optimizer, x, y, cfg.gradClip)
    _sync(dev)
    seconds = (time.perf_counter() - start) / steps
    tokens = cfg.batch * config.ctx
    return {
        "preset": preset,
        "device": dev.type,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "params": config.param_count(),
        "batch": cfg.batch,
        "ctx": config.ctx,
        "steps": steps,
        "warmup": warmup,
        "ms_per_step": round(seconds * 1e3, 3),
        "tokens_per_s": round(tokens / seconds, 1),
        "gflops": round(flops_per_token(config) * tokens / seconds / 1e9, 3),
    }
