"""LoRA for TinyGPT: W x + b  becomes  W x + b + (alpha / r) * B (A x)  on chosen projections.

A: (r, in) drawn from the portable PRNG (docs/format.md, "LoRA adapter file"), B: (out, r) zeros, so
adding adapters changes nothing until they train. The base model is frozen.

The adapters live beside the model, not inside it: forward hooks on the chosen nn.Linear modules add
the low-rank term, so model.named_parameters() stays exactly the manifest. A LoRA model therefore
still saves as a plain .tinygpt, and merged (W += scale * B A) that file is a fine-tuned model every
level loads with no LoRA code at all.
"""
from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ConfigError, ModelConfig
from .model import TinyGPT, manifest
from .prng import MASK64, normal_float32
from .tinygpt_file import PREFIX, TinyGPTFileError, atomic_write, crc32_arrays, decode_header, encode_header

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "fc_in", "fc_out")  # also the canonical order
LORA_STREAM_KEY = 0x4C6F526141646170  # ASCII "LoRAAdap": the adapter init stream is seed XOR this
ADAPTER_MAGIC = b"TGLA"
ADAPTER_VERSION = 1


class AdapterFileError(TinyGPTFileError):
    """A LoRA adapter file that cannot be trusted or does not fit the model; the message says why."""


@dataclass(frozen=True)
class LoRAConfig:
    rank: int
    alpha: float
    targets: tuple[str, ...] = ("q_proj", "v_proj")
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank <= 0:
            raise ConfigError(f"LoRA rank must be a positive integer, got {self.rank!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0 < self.alpha < math.inf:
            raise ConfigError(f"LoRA alpha must be a positive number, got {self.alpha!r}")
        targets = tuple(self.targets) if isinstance(self.targets, (list, tuple)) else None
        unknown = [t for t in targets or () if t not in TARGETS]
        if not targets or unknown or len(set(targets)) != len(targets):
            raise ConfigError(
                f"LoRA targets must be distinct names among {', '.join(TARGETS)}, got {self.targets!r}"
            )
        # canonical order, so that the same set of targets always gives the same adapter layout
        object.__setattr__(self, "targets", tuple(t for t in TARGETS if t in targets))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**53:
            raise ConfigError(f"LoRA seed must be an integer in [0, 2^53), got {self.seed!r}")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def to_json(self) -> dict:
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets), "seed": self.seed}

    @classmethod
    def from_json(cls, d) -> "LoRAConfig":
        if not isinstance(d, dict) or not {"rank", "alpha", "targets", "seed"} <= set(d):
            raise ConfigError(f"LoRA config must be an object with rank, alpha, targets, seed, got {d!r}")
        return cls(d["rank"], d["alpha"], d["targets"], d["seed"])


def _module_path(block: int, target: str) -> str:
    return f"blocks.{block}.{'mlp' if target.startswith('fc_') else 'attn'}.{target}"


def adapter_manifest(model_config: ModelConfig, lora: LoRAConfig) -> list[tuple[str, tuple[int, ...]]]:
    """Every adapter tensor in file and init order: per block, per target (canonical order), A then B."""
    tensors, shapes = [], dict(manifest(model_config))
    for i in range(model_config.nLayer):
        for target in lora.targets:
            name = _module_path(i, target)
            out_f, in_f = shapes[name + ".weight"]
            tensors += [(name + ".lora_A", (lora.rank, in_f)), (name + ".lora_B", (out_f, lora.rank))]
    return tensors


def initial_adapter_values(model_config: ModelConfig, lora: LoRAConfig):
    """Yield (name, float32 array): A = float32(z_j / sqrt(in)) from stream seed ^ LORA_STREAM_KEY, B = 0."""
    drawn = 0
    state0 = (lora.seed ^ LORA_STREAM_KEY) & MASK64
    for name, shape in adapter_manifest(model_config, lora):
        numel = math.prod(shape)
        if name.endswith(".lora_A"):
            values = normal_float32(state0, drawn, numel, 1.0 / math.sqrt(shape[1]))
            drawn += numel
        else:
            values = np.zeros(numel, dtype=np.float32)
        yield name, values.reshape(shape)


def base_weights_crc32(model: TinyGPT) -> str:
    """CRC-32 of the model's weights as a .tinygpt weight block: which base an adapter belongs to."""
    return f"{crc32_arrays(p.detach().cpu().numpy() for p in model.parameters()):08x}"


class LoRA(nn.Module):
    """Adapters attached to a frozen TinyGPT. parameters() are the adapters only; calling it runs the model."""

    def __init__(self, model: TinyGPT, config: LoRAConfig):
        super().__init__()
        if getattr(model, "lora_attached", False):
            raise RuntimeError("this model already has LoRA adapters attached; load a fresh base model")
        object.__setattr__(self, "model", model)  # held, not registered: parameters() stay the adapters
        self.config = config
        self.merged = False
        self.base_crc32 = base_weights_crc32(model)
        for p in model.parameters():
            p.requires_grad_(False)
        first = next(model.parameters())
        device, dtype = first.device, first.dtype  # float32 init values are exact in float64 too
        values = dict(initial_adapter_values(model.config, config))
        self.names = [name for name, _ in adapter_manifest(model.config, config)]
        self.lora_A, self.lora_B, self.linears = nn.ParameterList(), nn.ParameterList(), []
        modules = dict(model.named_modules())
        for name in self.names[0::2]:
            base = name.removesuffix(".lora_A")
            self.lora_A.append(nn.Parameter(torch.from_numpy(values[base + ".lora_A"]).to(device, dtype)))
            self.lora_B.append(nn.Parameter(torch.from_numpy(values[base + ".lora_B"]).to(device, dtype)))
            self.linears.append(modules[base])
            modules[base].register_forward_hook(self._hook(len(self.linears) - 1))
        model.lora_attached = True

    def _hook(self, k: int):
        def add_low_rank(module, inputs, output):
            # x: (B,T,in) -> A x: (B,T,r) -> B A x: (B,T,out); skipped once merged into W
            if self.merged:
                return output
            return output + self.config.scale * F.linear(F.linear(inputs[0], self.lora_A[k]), self.lora_B[k])
        return add_low_rank

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    def named_adapters(self):
        """(name, tensor) in adapter_manifest order."""
        for k in range(len(self.linears)):
            yield self.names[2 * k], self.lora_A[k]
            yield self.names[2 * k + 1], self.lora_B[k]

    @torch.no_grad()
    def merge(self) -> None:
        """W += scale * B A in every adapted Linear; the hooks then add nothing (for inference and export)."""
        if self.merged:
            raise RuntimeError("LoRA adapters are already merged")
        for linear, a, b in zip(self.linears, self.lora_A, self.lora_B):
            linear.weight += self.config.scale * (b @ a)
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """W -= scale * B A: the base weights again, up to float32 rounding of the add and subtract."""
        if not self.merged:
            raise RuntimeError("LoRA adapters are not merged")
        for linear, a, b in zip(self.linears, self.lora_A, self.lora_B):
            linear.weight -= self.config.scale * (b @ a)
        self.merged = False


def save_adapter(path: str | Path, lora: LoRA, **meta) -> None:
    """Write the adapters (docs/format.md, "LoRA adapter file"); atomic like a checkpoint save."""
    arrays = []
    for name, t in lora.named_adapters():
        a = t.detach().cpu().numpy().astype(np.float32)
        if not np.isfinite(a).all():
            raise AdapterFileError(f"refusing to save: adapter tensor {name} holds NaN or infinity")
        arrays.append(a)
    header = dict(meta)
    header.update(
        lora=lora.config.to_json(),
        baseConfig=lora.model.config.to_json(),
        baseWeightsCrc32=lora.base_crc32,
        manifest=_entries(lora.model.config, lora.config),
        dataCrc32=f"{crc32_arrays(arrays):08x}",
    )
    text = encode_header(header)
    atomic_write(path, [PREFIX.pack(ADAPTER_MAGIC, ADAPTER_VERSION, len(text)), text]
                 + [memoryview(np.ascontiguousarray(a, dtype="<f4")).cast("B") for a in arrays])


def _entries(model_config: ModelConfig, lora: LoRAConfig) -> list[dict]:
    entries, offset = [], 0
    for name, shape in adapter_manifest(model_config, lora):
        entries.append({"name": name, "shape": list(shape), "offset": offset})
        offset += math.prod(shape)
    return entries


def load_adapter(path: str | Path, model: TinyGPT, check_base: bool = True) -> LoRA:
    """Attach the adapters of a file to model (frozen); refuses a file that is damaged or does not fit.

    check_base=False accepts an adapter trained on other weights of the same shapes (e.g. a base
    fine-tuned further), which otherwise is refused because it would silently give different outputs.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise AdapterFileError(f"adapter file {str(path)!r} cannot be read: {e.strerror or e}") from None
    if len(raw) < PREFIX.size:
        raise AdapterFileError(f"adapter file is truncated: {len(raw)} bytes, shorter than the 12-byte prefix")
    magic, version, n = PREFIX.unpack(raw[:PREFIX.size])
    if magic != ADAPTER_MAGIC:
        hint = " (that is a model checkpoint, not an adapter)" if magic == b"TGPT" else ""
        raise AdapterFileError(f"not a LoRA adapter file: magic is {magic!r}, expected b'TGLA'{hint}")
    if version != ADAPTER_VERSION:
        raise AdapterFileError(f"unknown adapter file version {version}; this reader knows version {ADAPTER_VERSION}")
    if PREFIX.size + n > len(raw):
        raise AdapterFileError(f"adapter file is truncated: header of {n} bytes runs past the end ({len(raw)} bytes)")
    try:
        header = decode_header(raw[PREFIX.size:PREFIX.size + n])
    except TinyGPTFileError as e:
        raise AdapterFileError(f"adapter {e}") from None
    for key, kind in (("lora", dict), ("baseConfig", dict), ("manifest", list), ("dataCrc32", str),
                      ("baseWeightsCrc32", str)):
        if not isinstance(header.get(key), kind):
            raise AdapterFileError(f"adapter header key {key!r} is missing or not a {kind.__name__}")
    try:
        config = LoRAConfig.from_json(header["lora"])
        base = ModelConfig.from_json(header["baseConfig"])
    except (ConfigError, TypeError) as e:
        raise AdapterFileError(f"adapter header config invalid: {e}") from None
    if base != model.config:
        raise AdapterFileError(
            f"adapter does not fit this model: it was made for {json.dumps(base.to_json())}, "
            f"the model is {json.dumps(model.config.to_json())}"
        )
    entries = _entries(model.config, config)
    if header["manifest"] != entries or not _all_int(header["manifest"]):
        raise AdapterFileError("adapter manifest/shape mismatch: its tensors are not those its LoRA config implies")
    count = sum(math.prod(e["shape"]) for e in entries)
    data = raw[PREFIX.size + n:]
    if len(data) != 4 * count:
        raise AdapterFileError(f"adapter data length mismatch: {len(data)} bytes, expected {4 * count}")
    if f"{zlib.crc32(data):08x}" != header["dataCrc32"]:
        raise AdapterFileError("adapter data CRC32 mismatch: the adapter is corrupt")
    flat = np.frombuffer(data, dtype="<f4")
    if not np.isfinite(flat).all():
        raise AdapterFileError("adapter holds non-finite values (NaN or infinity)")
    if check_base and header["baseWeightsCrc32"] != base_weights_crc32(model):
        raise AdapterFileError(
            f"adapter was trained on other base weights (base CRC32 {header['baseWeightsCrc32']}, "
            f"this model's {base_weights_crc32(model)}); pass check_base=False to attach it anyway"
        )
    lora = LoRA(model, config)
    with torch.no_grad():
        for (name, t), e in zip(lora.named_adapters(), entries):
            size = math.prod(e["shape"])
            t.copy_(torch.from_numpy(flat[e["offset"]:e["offset"] + size].reshape(e["shape"]).copy()))
    return lora


def _all_int(entries: list) -> bool:
    """True if every shape and offset is a JSON integer (8.0 == 8 in Python, so == alone is not enough)."""
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)
    return all(is_int(e["offset"]) and all(is_int(d) for d in e["shape"]) for e in entries)
