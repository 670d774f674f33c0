"""PyTorch's training-step throughput per preset (`tinygpt bench`): ms/step, tokens/s and achieved
GFLOP/s (python_ref/flops.py). The native bench imports bench_preset to compare its figures with
PyTorch's on the same machine.
"""
from __future__ import annotations

import time

import torch

from python_ref.config import DEFAULT_CORPUS, ConfigError, model_config, train_config
from python_ref.flops import flops_per_token
from python_ref.data import BatchStream, Corpus
from python_ref.model import TinyGPT
from python_ref.train import make_optimizer, resolve_device, train_step


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
    train_cfg = train_config(preset)
    dev = resolve_device(device)
    train, _ = Corpus.from_file(DEFAULT_CORPUS).split(train_cfg.valFraction, config.ctx)
    stream = BatchStream(train, config.ctx, train_cfg.batch, train_cfg.seed)
    batches = [tuple(torch.from_numpy(a).to(dev) for a in stream.next()) for _ in range(warmup + steps)]
    model = TinyGPT(config, train_cfg.seed).to(dev)
    optimizer = make_optimizer(model, train_cfg)
    for x, y in batches[:warmup]:
        train_step(model, optimizer, x, y, train_cfg.gradClip)
    _sync(dev)
    start = time.perf_counter()
    for x, y in batches[warmup:]:
        train_step(model, optimizer, x, y, train_cfg.gradClip)
    _sync(dev)
    seconds = (time.perf_counter() - start) / steps
    tokens = train_cfg.batch * config.ctx
    return {
        "preset": preset,
        "device": dev.type,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "params": config.param_count(),
        "batch": train_cfg.batch,
        "ctx": config.ctx,
        "steps": steps,
        "warmup": warmup,
        "ms_per_step": round(seconds * 1e3, 3),
        "tokens_per_s": round(tokens / seconds, 1),
        "gflops": round(flops_per_token(config) * tokens / seconds / 1e9, 3),
    }
