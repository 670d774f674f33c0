"""The TinyGPT model: a GPT-2-style byte-level decoder (pre-LayerNorm, tied embedding head).

Shapes: B batch, T time, C dModel, H heads, D = C / H head size, V = 256 bytes.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig, init_std
from .prng import normal_float32


def manifest(config: ModelConfig) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of the model, in the canonical order of the .tinygpt state and of the init stream.

    Linear weights are PyTorch's [out, in], row-major.
    """
    C, V = config.dModel, config.vocabSize
    tensors = [("token_embedding.weight", (V, C)), ("position_embedding.weight", (config.ctx, C))]
    for i in range(config.nLayer):
        p = f"blocks.{i}."
        tensors += [(p + "ln1.weight", (C,)), (p + "ln1.bias", (C,))]
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors += [(p + f"attn.{proj}.weight", (C, C)), (p + f"attn.{proj}.bias", (C,))]
        tensors += [(p + "ln2.weight", (C,)), (p + "ln2.bias", (C,))]
        tensors += [(p + "mlp.fc_in.weight", (4 * C, C)), (p + "mlp.fc_in.bias", (4 * C,))]
        tensors += [(p + "mlp.fc_out.weight", (C, 4 * C)), (p + "mlp.fc_out.bias", (C,))]
    tensors += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return tensors


def init_rule(name: str, config: ModelConfig) -> tuple[str, float]:
    """('normal', std) | ('zeros', 0) | ('ones', 0) for a manifest tensor."""
    if name.endswith(".bias"):
        return ("zeros", 0.0)
    if ".ln" in name or name.startswith("ln_f"):
        return ("ones", 0.0)
    std = init_std()
    if name.endswith("o_proj.weight") or name.endswith("fc_out.weight"):
        return ("normal", std / math.sqrt(2 * config.nLayer))
    return ("normal", std)


def initial_tensor_values(config: ModelConfig, seed: int):
    """Yield (name, float32 ndarray) in manifest order, drawn from the portable init stream."""
    drawn = 0
    for name, shape in manifest(config):
        kind, std = init_rule(name, config)
        numel = math.prod(shape)
        if kind == "normal":
            values = normal_float32(seed, drawn, numel, std)
            drawn += numel
        elif kind == "ones":
            values = np.ones(numel, dtype=np.float32)
        else:
            values = np.zeros(numel, dtype=np.float32)
        yield name, values.reshape(shape)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        C = config.dModel
        self.n_head = config.nHead
        self.q_proj = nn.Linear(C, C)
        self.k_proj = nn.Linear(C, C)
        self.v_proj = nn.Linear(C, C)
        self.o_proj = nn.Linear(C, C)

    def forward(self, x, cache=None):
        # x: (B,T,C); cache: None or {"k","v"} of (B,H,Tpast,D), extended in place
        B, T, C = x.shape
        H = self.n_head
        q = self.q_proj(x).view(B, T, H, C // H).transpose(1, 2)  # (B,H,T,D)
        k = self.k_proj(x).view(B, T, H, C // H).transpose(1, 2)
        v = self.v_proj(x).view(B, T, H, C // H).transpose(1, 2)
        past = 0
        if cache is not None:
            if "k" in cache:
                past = cache["k"].shape[2]
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        if past == 0:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            # query t (absolute past + t) sees keys 0 .. past + t
            mask = torch.ones(T, past + T, dtype=torch.bool, device=x.device).tril(diagonal=past)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc_in = nn.Linear(config.dModel, 4 * config.dModel)
        self.fc_out = nn.Linear(4 * config.dModel, config.dModel)

    def forward(self, x):
        # x: (B,T,C) -> (B,T,4C) -> (B,T,C); GELU in GPT-2's tanh form, the same function at every level
        return self.fc_out(F.gelu(self.fc_in(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.dModel, eps=config.layerNormEps)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.dModel, eps=config.layerNormEps)
        self.mlp = MLP(config)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln1(x), cache)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, config: ModelConfig, seed: int | None = 0):
        """seed=None leaves torch's default init (for a model whose state is loaded next)."""
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocabSize, config.dModel)
        self.position_embedding = nn.Embedding(config.ctx, config.dModel)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.nLayer))
        self.ln_f = nn.LayerNorm(config.dModel, eps=config.layerNormEps)
        names = [n for n, _ in self.named_parameters()]
        assert names == [n for n, _ in manifest(config)], "module order must follow the manifest"
        if seed is not None:
            self.init_from_seed(seed)

    @torch.no_grad()
    def init_from_seed(self, seed: int):
        params = dict(self.named_parameters())
        for name, values in initial_tensor_values(self.config, seed):
            params[name].copy_(torch.from_numpy(values))

    def forward(self, idx, targets=None, caches=None, pos_offset: int = 0):
        # idx: (B,T) bytes; targets: (B,T) or None; caches: one dict per block for KV-cache decoding
        B, T = idx.shape
        if pos_offset + T > self.config.ctx:
            raise ValueError(f"sequence of {pos_offset + T} tokens exceeds the context of {self.config.ctx}")
        cached = caches[0]["k"].shape[2] if caches is not None and "k" in caches[0] else 0
        if caches is not None and cached != pos_offset:
            # a mismatch would attend to the wrong keys without any error
            raise ValueError(f"pos_offset {pos_offset} differs from the {cached} positions held in the KV cache")
        pos = torch.arange(pos_offset, pos_offset + T, device=idx.device)
        x = self.token_embedding(idx) + self.position_embedding(pos)  # (B,T,C)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        x = self.ln_f(x)
        logits = x @ self.token_embedding.weight.t()  # (B,T,V): the head is the tied embedding
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
