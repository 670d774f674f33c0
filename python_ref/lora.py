"""LoRA for TinyGPT: W x + b  becomes  W x + b + (alpha / r) * B (A x)  on chosen projections.

A: (r, in) drawn from the portable PRNG (docs/format.md, "LoRA adapter file"), B: (out, r) zeros, so
adding adapters changes nothing until they train. The base model is frozen.

The adapters live beside the model, not inside it: forward hooks on the chosen nn.Linear modules add
the low-rank term, so model.named_parameters() stays exactly the manifest. A LoRA model therefore
still saves as a plain .tinygpt, and merged (W += scale * B A) that file is a fine-tuned model every
level loads with no LoRA code at all.

An adapter file (docs/format.md, "LoRA adapter file") holds the adapters alone, or, saved with the
optimizer, also their AdamW moments and step: with the header's data state and corpus, everything a
fine-tune (python_ref/finetune.py) needs to resume exactly. It names its base by the CRC-32 and the
SHA-256 of the base's weights; an adapter on another base is refused with both hashes named.
"""
from __future__ import annotations

import hashlib
import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ConfigError, ModelConfig, check_fields, presets_file
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
        # rank and alpha by presets.json's rules ("lora"), in the words every level writes
        try:
            check_fields("lora", {"rank": self.rank, "alpha": self.alpha})
        except ConfigError as e:
            raise ConfigError(f"LoRA {e}") from None
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


def lora_defaults() -> dict:
    """presets.json's "lora": rank, alpha, targets, and the lr, weightDecay and steps of a fine-tune."""
    return dict(presets_file()["lora"])


def target_mask(targets) -> int:
    """The C API's bit mask (tg_lora_config.targets): bit i for TARGETS[i]."""
    return sum(1 << TARGETS.index(t) for t in targets)


def base_weights_crc32(model: TinyGPT) -> str:
    """CRC-32 of the model's weights as a .tinygpt weight block: which base an adapter belongs to."""
    return f"{crc32_arrays(p.detach().cpu().numpy() for p in model.parameters()):08x}"


def base_weights_sha256(model: TinyGPT) -> str:
    """SHA-256 of the same bytes (float32 LE, manifest order): the base's identity where a CRC-32,
    made to catch damage, could be matched on purpose or by chance (1 in 2^32)."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(memoryview(np.ascontiguousarray(p.detach().cpu().numpy(), dtype="<f4")).cast("B"))
    return h.hexdigest()


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
        self.base_sha256 = base_weights_sha256(model)
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
    def merged_weights(self) -> dict[str, np.ndarray]:
        """The base's weights with W + scale * B A in every adapted Linear (merge()'s arithmetic), as
        float32 arrays by manifest name, leaving the model itself as it is (for the merged download)."""
        if self.merged:
            raise RuntimeError("LoRA adapters are already merged")
        linears = {id(linear): k for k, linear in enumerate(self.linears)}
        modules = dict(self.model.named_modules())
        out = {}
        for name, p in self.model.named_parameters():
            module = modules[name.rsplit(".", 1)[0]]
            k = linears.get(id(module))
            if k is not None and name.endswith(".weight"):
                p = p + self.config.scale * (self.lora_B[k] @ self.lora_A[k])
            out[name] = p.detach().cpu().numpy().astype(np.float32)
        return out

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


def make_adapter_optimizer(lora: LoRA, train_cfg) -> torch.optim.AdamW:
    """AdamW over the adapters alone (the base has no moments), with the run's settings; weight decay
    (train_cfg.weightDecay, presets.json's lora default 0) on every adapter tensor, all 2-D."""
    # float(): JSON has one kind of number, so a resumed file's weightDecay of 0 reads as the int 0
    return torch.optim.AdamW(lora.parameters(), lr=float(train_cfg.lr),
                             betas=(float(train_cfg.beta1), float(train_cfg.beta2)), eps=float(train_cfg.eps),
                             weight_decay=float(train_cfg.weightDecay))


def adapter_moments(lora: LoRA, optimizer) -> tuple[list, list, int] | None:
    """AdamW's exp_avg and exp_avg_sq of every adapter tensor (adapter-manifest order) and the step,
    or None before the first step."""
    m, v, steps = [], [], set()
    for _, t in lora.named_adapters():
        st = optimizer.state.get(t, {})
        if "exp_avg" not in st:
            return None
        m.append(st["exp_avg"].detach().cpu().numpy())
        v.append(st["exp_avg_sq"].detach().cpu().numpy())
        steps.add(int(st["step"]))
    if len(steps) != 1:
        raise AdapterFileError(f"refusing to save: the optimizer's adapter tensors disagree on the step "
                               f"({sorted(steps)})")
    return m, v, steps.pop()


def save_adapter(path: str | Path, lora: LoRA, optimizer=None, **meta) -> None:
    """Write the adapters (docs/format.md, "LoRA adapter file"); atomic like a checkpoint save.

    Given an optimizer that has stepped, the file also holds the adapters' AdamW moments and the step
    (includesOptimizerState): with meta's dataState, training and corpus, a fine-tune resumes from it
    exactly. meta may not name another step than the optimizer's.
    """
    blocks = [("adapter", [t.detach().cpu().numpy() for _, t in lora.named_adapters()])]
    moments = adapter_moments(lora, optimizer) if optimizer is not None else None
    header = dict(meta)
    if moments:
        blocks += [("AdamW m", moments[0]), ("AdamW v", moments[1])]
        if header.setdefault("step", moments[2]) != moments[2]:
            raise AdapterFileError(f"refusing to save: step {header['step']} differs from the optimizer's "
                                   f"step {moments[2]}")
    arrays = []
    for what, block in blocks:
        for name, a in zip(lora.names, block):
            a = np.asarray(a, dtype=np.float32)
            if not np.isfinite(a).all():
                raise AdapterFileError(f"refusing to save: {what} tensor {name} holds NaN or infinity")
            arrays.append(a)
    header.update(
        lora=lora.config.to_json(),
        baseConfig=lora.model.config.to_json(),
        baseWeightsCrc32=lora.base_crc32,
        baseWeightsSha256=lora.base_sha256,
        manifest=_entries(lora.model.config, lora.config),
        includesOptimizerState=bool(moments),
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


@dataclass
class AdapterFile:
    """Everything an adapter file holds, checked (all but which base it belongs to: attach_adapter)."""
    config: LoRAConfig
    base_config: ModelConfig
    header: dict
    tensors: list[np.ndarray]  # adapter-manifest order and shapes, float32
    m: list[np.ndarray] | None = None
    v: list[np.ndarray] | None = None
    step: int | None = None  # AdamW steps of the adapters (required with moments)
    names: list[str] = field(default_factory=list)


def read_adapter(path: str | Path) -> AdapterFile:
    """Read and check an adapter file; refuses a file that is damaged or inconsistent, naming why."""
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
    with_moments = header.get("includesOptimizerState", False)
    if not isinstance(with_moments, bool):
        raise AdapterFileError("adapter header key 'includesOptimizerState' is not a bool")
    step = header.get("step")
    if step is not None and not (_is_int(step) and 0 <= step < 2**31):
        raise AdapterFileError(f"adapter header key 'step' must be an integer in [0, 2^31), got {step!r}")
    if with_moments and step is None:
        raise AdapterFileError("adapter holds AdamW moments but no 'step': it cannot be resumed exactly")
    sha = header.get("baseWeightsSha256")
    if sha is not None and not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
        raise AdapterFileError("adapter header key 'baseWeightsSha256' must be 64 lowercase hex digits")
    try:
        config = LoRAConfig.from_json(header["lora"])
        base = ModelConfig.from_json(header["baseConfig"])
    except (ConfigError, TypeError) as e:
        raise AdapterFileError(f"adapter header config invalid: {e}") from None
    blocks = 3 if with_moments else 1
    # the length first (arithmetic on the config), the manifest only then: bounded by the file's size
    count = sum(math.prod(s) for _, s in _shapes(base, config))
    data = raw[PREFIX.size + n:]
    if len(data) != 4 * count * blocks:
        what = "adapters + AdamW m and v" if with_moments else "adapters"
        raise AdapterFileError(f"adapter data length mismatch: {len(data)} bytes, expected {4 * count * blocks} "
                               f"({blocks} x {count} float32: {what})")
    entries = _entries(base, config)
    if header["manifest"] != entries or not _all_int(header["manifest"]):
        raise AdapterFileError("adapter manifest/shape mismatch: its tensors are not those its LoRA config implies")
    if f"{zlib.crc32(data):08x}" != header["dataCrc32"]:
        raise AdapterFileError("adapter data CRC32 mismatch: the adapter is corrupt")
    flat = np.frombuffer(data, dtype="<f4")
    if not np.isfinite(flat).all():
        raise AdapterFileError("adapter holds non-finite values (NaN or infinity)")
    split = []
    for b in range(blocks):
        split.append([flat[b * count + e["offset"]:b * count + e["offset"] + math.prod(e["shape"])]
                      .reshape(e["shape"]).copy() for e in entries])
    if with_moments and any((v < 0).any() for v in split[2]):
        raise AdapterFileError("negative value in an adapter's AdamW v: v is a mean of squares")
    m, v = (split[1], split[2]) if with_moments else (None, None)
    return AdapterFile(config, base, header, split[0], m, v, step, [e["name"] for e in entries])


def _shapes(base: ModelConfig, config: LoRAConfig):
    """adapter_manifest without building the model's manifest of an absurd config: shapes by formula."""
    C = base.dModel
    dims = {"q_proj": (C, C), "k_proj": (C, C), "v_proj": (C, C), "o_proj": (C, C), "fc_in": (C, 4 * C),
            "fc_out": (4 * C, C)}
    for _ in range(base.nLayer):
        for target in config.targets:
            in_f, out_f = dims[target]
            yield None, (config.rank, in_f)
            yield None, (out_f, config.rank)


def base_problem(adapter: AdapterFile, model: TinyGPT) -> str | None:
    """None if the adapter was made on these very weights, else the reason (config, or the weights' hashes)."""
    if adapter.base_config != model.config:
        return (f"adapter does not fit this model: it was made for {json.dumps(adapter.base_config.to_json())}, "
                f"the model is {json.dumps(model.config.to_json())}")
    crc, sha = base_weights_crc32(model), adapter.header.get("baseWeightsSha256")
    if adapter.header["baseWeightsCrc32"] != crc:
        return (f"adapter was trained on other base weights (base CRC32 {adapter.header['baseWeightsCrc32']}, "
                f"this model's {crc})")
    if sha is not None and sha != base_weights_sha256(model):
        return (f"adapter was trained on other base weights (base SHA-256 {sha[:16]}..., this model's "
                f"{base_weights_sha256(model)[:16]}...; their CRC32s agree)")
    return None


def attach_adapter(adapter: AdapterFile, model: TinyGPT, check_base: bool = True) -> LoRA:
    """Attach a read adapter to model (frozen). check_base=False accepts an adapter trained on other
    weights of the same shapes (e.g. a base fine-tuned further), which otherwise is refused because it
    would silently give different outputs."""
    problem = base_problem(adapter, model)
    if problem is not None and (check_base or problem.startswith("adapter does not fit")):
        hint = "" if problem.startswith("adapter does not fit") else "; pass check_base=False to attach it anyway"
        raise AdapterFileError(problem + hint)
    lora = LoRA(model, adapter.config)
    with torch.no_grad():
        for (_, t), values in zip(lora.named_adapters(), adapter.tensors):
            t.copy_(torch.from_numpy(values))
    return lora


def load_adapter(path: str | Path, model: TinyGPT, check_base: bool = True) -> LoRA:
    """Attach the adapters of a file to model (frozen); refuses a file that is damaged or does not fit
    (read_adapter, attach_adapter)."""
    return attach_adapter(read_adapter(path), model, check_base)


def restore_adapter_optimizer(lora: LoRA, optimizer, adapter: AdapterFile) -> None:
    """Put a file's adapter moments and step into a fresh AdamW over lora's adapters."""
    if adapter.m is None:
        return
    for (_, t), m, v in zip(lora.named_adapters(), adapter.m, adapter.v):
        optimizer.state[t] = {"step": torch.tensor(float(adapter.step)),
                              "exp_avg": torch.from_numpy(m).to(t.device, t.dtype),
                              "exp_avg_sq": torch.from_numpy(v).to(t.device, t.dtype)}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _all_int(entries: list) -> bool:
    """True if every shape and offset is a JSON integer (8.0 == 8 in Python, so == alone is not enough)."""
    return all(isinstance(e, dict) and _is_int(e.get("offset")) and isinstance(e.get("shape"), list)
               and all(_is_int(d) for d in e["shape"]) for e in entries)
