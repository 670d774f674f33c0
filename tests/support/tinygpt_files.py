"""Small .tinygpt files for the reader tests of every level: a trained MICRO model with its AdamW moments,
float16 files, and the pieces to take a file apart and put it back with CRCs recomputed (so a test can
make a file whose header lies while its CRCs are right)."""
from __future__ import annotations

import json
import math
import tempfile
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from python_ref.config import ModelConfig
from python_ref.model import TinyGPT
from python_ref.tinygpt_file import PREFIX, manifest_entries, save

MICRO = ModelConfig(nLayer=1, nHead=2, dModel=8, ctx=4)
ODD = ModelConfig(nLayer=1, nHead=1, dModel=3, ctx=2)  # P = 927: a float16 state needs 2 bytes of padding


def trained(config: ModelConfig, steps: int = 3, seed: int = 0):
    """A model and a real torch AdamW after a few steps (decay only on 2+ dim tensors, as in training)."""
    model = TinyGPT(config, seed=seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, 256, (2, config.ctx), generator=g)
        _, loss = model(idx, torch.roll(idx, -1, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, opt


def split_file(raw: bytes) -> tuple[dict, bytes]:
    _, _, n = PREFIX.unpack(raw[:12])
    return json.loads(raw[12:12 + n]), raw[12 + n:]


def assemble(header: dict, state: bytes, header_crc: bool = True, state_crc: bool = False) -> bytes:
    """Bytes of a file with this header and state; header_crc recomputes headerCrc32 (if the key is
    there) the way the writer does, state_crc first puts the CRC of state into the header."""
    header = dict(header)
    if state_crc:
        header["stateCrc32"] = f"{zlib.crc32(state):08x}"
    has_crc = "headerCrc32" in header
    if has_crc and header_crc:
        header["headerCrc32"] = "00000000"
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(12 + len(text)) % 4)
    if has_crc and header_crc:
        crc = f"{zlib.crc32(text):08x}".encode()
        text = text.replace(b'"headerCrc32":"00000000"', b'"headerCrc32":"' + crc + b'"')
    return PREFIX.pack(b"TGPT", 2, len(text)) + text + state


def bits(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).view(np.uint32)


@lru_cache(maxsize=None)
def valid_file(optimizer: bool = True) -> bytes:
    """One valid MICRO file (with AdamW moments after 3 steps), built once per test session."""
    model, opt = trained(MICRO)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "v.tinygpt"
        if optimizer:
            save(path, model, opt, dataState={"seed": 1, "batchesDrawn": 3}, lossHistory=[[1, 5.5]], sample="hi")
        else:
            save(path, model, sample="hi")
        return path.read_bytes()


def float16_edge_values() -> np.ndarray:
    """float32 values where rounding to float16 is easy to get wrong: ties to even, subnormals, the
    largest finite float16 and what rounds to it, signed zeros, values that vanish."""
    tiny = 2.0 ** -24  # the smallest float16 subnormal
    return np.array([
        0.0, -0.0, 1.0, -1.0, 1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 2048 + 1, 2048 + 3,  # ties
        tiny, -tiny, 0.5 * tiny, -0.5 * tiny, 1.5 * tiny, 2.5 * tiny, 0.5000001 * tiny, 0.4999 * tiny,
        1023 * tiny, 1023.5 * tiny, 1024 * tiny, 2.0 ** -14, 1e-10, -1e-30, 1e-45,  # subnormals, vanishing
        65504.0, -65504.0, 65519.0, -65519.0, 65519.996, 0.1, 1 / 3, 3.14159265,
    ], dtype=np.float32)


def weights_with(config: ModelConfig, values: np.ndarray, seed: int = 0) -> dict:
    """Random normal weights of varied scales, values written over the start of token_embedding."""
    rng = np.random.default_rng(seed)
    weights = {}
    for e in manifest_entries(config):
        size = math.prod(e["shape"])
        weights[e["name"]] = (rng.standard_normal(size) * 10.0 ** rng.uniform(-6, 3, size)).astype(np.float32)
    weights["token_embedding.weight"][:values.size] = values
    return {e["name"]: weights[e["name"]].reshape(e["shape"]) for e in manifest_entries(config)}


@lru_cache(maxsize=None)
def float16_file(config: ModelConfig = MICRO) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        save(Path(d) / "h.tinygpt", TinyGPT(config, seed=4), dtype="float16", sample="hi")
        return (Path(d) / "h.tinygpt").read_bytes()


def float16_state_with(state: bytes, index: int, half_bits: int) -> bytes:
    halves = np.frombuffer(state[4:], dtype="<u2").copy()
    halves[index] = half_bits
    return state[:4] + halves.tobytes()
