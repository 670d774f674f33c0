"""FSDP2 (`fully_shard`) for models whose weights and AdamW moments do not fit one device.

Each rank holds 1/N of every parameter and of its moments; a block's full weights exist only while
that block runs. The trajectory is the data-parallel one (each rank its shard of the global batch,
gradients averaged by reduce-scatter), so the checkpoint is the same full, unsharded `.tinygpt`:
saving gathers one tensor at a time onto rank 0, and resuming scatters the file's tensors back.
"""
from __future__ import annotations

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from .tinygpt_file import CheckpointState


def shard_model(model: torch.nn.Module, device: torch.device, world_size: int) -> torch.nn.Module:
    """Each block its own unit (gathered for its forward and backward alone); the embeddings, the tied
    head and the final LayerNorm in the root unit. The parameters move to `device`, sharded."""
    mesh = init_device_mesh(device.type, (world_size,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def is_sharded(model: torch.nn.Module) -> bool:
    return isinstance(model, FSDPModule)


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor on CPU (a collective for a DTensor: every rank must call it, in the same order)."""
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu()


def gather_state(model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer) -> tuple[dict, dict | None, dict | None, int]:
    """(weights, m, v, step) as full CPU tensors by manifest name, on every rank; m and v None before a step."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()  # the root stays gathered after a forward (an evaluation): back to shards
    weights, m, v, steps = {}, {}, {}, set()
    for name, p in model.named_parameters():
        weights[name] = full_tensor(p)
        st = optimizer.state.get(p, {})
        if "exp_avg" in st:
            m[name], v[name] = full_tensor(st["exp_avg"]), full_tensor(st["exp_avg_sq"])
            steps.add(int(full_tensor(st["step"])))
    if not m:
        return weights, None, None, 0
    if len(steps) != 1 or len(m) != len(weights):
        raise RuntimeError(f"the sharded optimizer's tensors disagree on the step ({sorted(steps)})")
    return weights, m, v, steps.pop()


def restore_sharded_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                              state: CheckpointState) -> None:
    """The file's full moments, cut into the same shards as each parameter (rank r keeps its rows)."""
    if state.m is None:
        return
    for name, p in model.named_parameters():
        def place(a):
            return distribute_tensor(torch.from_numpy(a.copy()).to(p.device_mesh.device_type),
                                     p.device_mesh, p.placements)
        optimizer.state[p] = {"step": torch.tensor(float(state.step)),
                              "exp_avg": place(state.m[name]), "exp_avg_sq": place(state.v[name])}
