"""FLOPs of a training step and the GPUs' dense peaks, for the MFU `tinygpt train` prints (and the
GFLOP/s the benchmarks report).

FLOPs per token = 6N + 12·L·C·T (N parameters, T = ctx): 6N for the matmuls of forward and
backward, 12·L·C·T for attention's scores and weighted sums.
"""
from __future__ import annotations

import torch

from .config import ModelConfig


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
