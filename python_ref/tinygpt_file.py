"""Reader and writer of .tinygpt checkpoints (spec: docs/format.md).

"TGPT" | u32 LE version 2 | u32 LE header length N | N bytes UTF-8 JSON | state
state = i32 LE step | all weights (manifest order) | [all AdamW m | all AdamW v]   (float32 LE)
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import struct
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .config import ConfigError, ModelConfig
from .model import TinyGPT, manifest

MAGIC = b"TGPT"
VERSION = 2
PREFIX = struct.Struct("<4sII")
CRC_PLACEHOLDER = "00000000"
_HEADER_CRC_FIELD = re.compile(rb'"headerCrc32"\s*:\s*"([0-9a-f]{8})"')
_READ_CHUNK = 1 << 24


class TinyGPTFileError(ValueError):
    """A .tinygpt file that cannot be trusted; the message names the problem."""


@dataclass
class CheckpointState:
    """Everything a .tinygpt holds, as plain arrays (float32, manifest shapes)."""
    config: ModelConfig
    step: int
    weights: dict[str, np.ndarray]
    m: dict[str, np.ndarray] | None = None
    v: dict[str, np.ndarray] | None = None
    header: dict = field(default_factory=dict)


def manifest_entries(config: ModelConfig) -> list[dict]:
    entries, offset = [], 0
    for name, shape in manifest(config):
        entries.append({"name": name, "shape": list(shape), "offset": offset})
        offset += math.prod(shape)
    return entries


def _crc32_arrays(arrays, crc: int = 0) -> int:
    for a in arrays:
        crc = zlib.crc32(memoryview(np.ascontiguousarray(a, dtype="<f4")).cast("B"), crc)
    return crc


def _header_bytes(header: dict) -> bytes:
    """JSON padded with spaces so that the state starts 4-byte aligned; headerCrc32 covers it."""
    header = dict(header, headerCrc32=CRC_PLACEHOLDER)
    text = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    text += b" " * (-(PREFIX.size + len(text)) % 4)
    crc = zlib.crc32(text)
    return text.replace(f'"headerCrc32":"{CRC_PLACEHOLDER}"'.encode(), f'"headerCrc32":"{crc:08x}"'.encode())


def write_state(path: str | Path, state: CheckpointState) -> None:
    """Atomic write: a temp file beside the target, then rename, so a failure never clobbers saved work."""
    names = [e["name"] for e in manifest_entries(state.config)]
    blocks = [state.weights] + ([state.m, state.v] if state.m is not None else [])
    arrays = []
    for block in blocks:
        for name in names:
            a = np.asarray(block[name], dtype=np.float32)
            if not np.isfinite(a).all():
                raise TinyGPTFileError(f"refusing to save: tensor {name} holds NaN or infinity")
            arrays.append(a)
    step_bytes = struct.pack("<i", state.step)
    header = dict(state.header)
    header.update(
        config=state.config.to_json(),
        manifest=manifest_entries(state.config),
        includesOptimizerState=state.m is not None,
        stateCrc32=f"{_crc32_arrays(arrays, zlib.crc32(step_bytes)):08x}",
    )
    header.setdefault("savedAt", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    text = _header_bytes(header)
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(PREFIX.pack(MAGIC, VERSION, len(text)))
            f.write(text)
            f.write(step_bytes)
            for a in arrays:
                f.write(memoryview(np.ascontiguousarray(a, dtype="<f4")).cast("B"))
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _parse_header(raw: bytes) -> dict:
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise TinyGPTFileError(f"header JSON invalid: {e}") from None
    if not isinstance(header, dict):
        raise TinyGPTFileError("header JSON invalid: expected an object")
    found = _HEADER_CRC_FIELD.findall(raw)
    if len(found) != 1 or header.get("headerCrc32") != found[0].decode():
        raise TinyGPTFileError("header lacks a valid headerCrc32 field")
    crc = zlib.crc32(_HEADER_CRC_FIELD.sub(f'"headerCrc32":"{CRC_PLACEHOLDER}"'.encode(), raw, count=1))
    if f"{crc:08x}" != header["headerCrc32"]:
        raise TinyGPTFileError("header CRC32 mismatch: the header is corrupt")
    for key, kind in (("config", dict), ("manifest", list), ("includesOptimizerState", bool), ("stateCrc32", str)):
        if not isinstance(header.get(key), kind):
            raise TinyGPTFileError(f"header key {key!r} is missing or not a {kind.__name__}")
    return header


def _check_manifest(header: dict, config: ModelConfig) -> None:
    expected = manifest_entries(config)
    got = header["manifest"]
    if len(got) != len(expected):
        raise TinyGPTFileError(
            f"manifest/shape mismatch: {len(got)} tensors listed, the config implies {len(expected)}"
        )
    for g, e in zip(got, expected):
        if not isinstance(g, dict) or g.get("name") != e["name"]:
            name = g.get("name") if isinstance(g, dict) else g
            raise TinyGPTFileError(f"manifest/shape mismatch: found tensor {name!r} where {e['name']!r} belongs")
        if g.get("shape") != e["shape"] or g.get("offset") != e["offset"]:
            raise TinyGPTFileError(
                f"manifest/shape mismatch: {e['name']} is listed as shape {g.get('shape')} at offset "
                f"{g.get('offset')}, the config implies {e['shape']} at {e['offset']}"
            )


def read_state(path: str | Path) -> CheckpointState:
    path = Path(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise TinyGPTFileError(f"{str(path)!r} does not exist") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        prefix = f.read(PREFIX.size)
        if len(prefix) < PREFIX.size:
            raise TinyGPTFileError(f"file is truncated: {size} bytes, shorter than the 12-byte prefix")
        magic, version, n = PREFIX.unpack(prefix)
        if magic != MAGIC:
            raise TinyGPTFileError(f"not a .tinygpt file: magic is {magic!r}, expected b'TGPT'")
        if version != VERSION:
            raise TinyGPTFileError(f"unknown .tinygpt version {version}; this reader knows version {VERSION}")
        if PREFIX.size + n > size:
            raise TinyGPTFileError(f"file is truncated: header of {n} bytes runs past the end ({size} bytes)")
        header = _parse_header(f.read(n))
        try:
            config = ModelConfig.from_json(header["config"])
        except (ConfigError, TypeError) as e:
            raise TinyGPTFileError(f"config in header invalid: {e}") from None
        _check_manifest(header, config)
        count = config.param_count()
        blocks = 3 if header["includesOptimizerState"] else 1
        expected = 4 + 4 * count * blocks
        actual = size - PREFIX.size - n
        if actual != expected:
            raise TinyGPTFileError(
                f"state length mismatch: {actual} bytes after the header, expected {expected} "
                f"(step + {blocks} x {count} float32){' - the file is truncated' if actual < expected else ''}"
            )
        step_bytes = f.read(4)
        flat = np.empty(count * blocks, dtype="<f4")
        view = memoryview(flat).cast("B")
        crc, pos = zlib.crc32(step_bytes), 0
        while pos < len(view):
            got = f.readinto(view[pos:pos + _READ_CHUNK])
            if not got:
                raise TinyGPTFileError("file is truncated: state ends early")
            crc = zlib.crc32(view[pos:pos + got], crc)
            pos += got
    if f"{crc:08x}" != header["stateCrc32"]:
        raise TinyGPTFileError("state CRC32 mismatch: the weights are corrupt")
    step = struct.unpack("<i", step_bytes)[0]
    if step < 0:
        raise TinyGPTFileError(f"step is negative ({step})")
    entries = header["manifest"]
    split = [{e["name"]: flat[b * count + e["offset"]: b * count + e["offset"] + math.prod(e["shape"])]
              .reshape(e["shape"]) for e in entries} for b in range(blocks)]
    for b, block in enumerate(split):
        for name, a in block.items():
            if not np.isfinite(a).all():
                what = ("weights", "AdamW m", "AdamW v")[b]
                raise TinyGPTFileError(f"non-finite value (NaN or infinity) in {what} of {name}")
    return CheckpointState(config, step, split[0], *(split[1:] if blocks == 3 else (None, None)), header=header)


def model_from_state(state: CheckpointState, device="cpu") -> TinyGPT:
    model = TinyGPT(state.config, seed=None)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(np.array(state.weights[name])))
    return model.to(device)


def optimizer_moments(model: TinyGPT, optimizer) -> tuple[dict, dict] | None:
    """AdamW's exp_avg / exp_avg_sq by manifest name, or None before the first step."""
    m, v = {}, {}
    for name, p in model.named_parameters():
        st = optimizer.state.get(p, {})
        if "exp_avg" not in st:
            return None
        m[name] = st["exp_avg"].detach().cpu().numpy()
        v[name] = st["exp_avg_sq"].detach().cpu().numpy()
    return m, v


def restore_optimizer(model: TinyGPT, optimizer, state: CheckpointState) -> None:
    """Put the file's AdamW moments and step into a fresh torch AdamW over model's parameters."""
    if state.m is None:
        return
    for name, p in model.named_parameters():
        optimizer.state[p] = {
            "step": torch.tensor(float(state.step)),
            "exp_avg": torch.from_numpy(np.array(state.m[name])).to(p.device),
            "exp_avg_sq": torch.from_numpy(np.array(state.v[name])).to(p.device),
        }


def save(path, model: TinyGPT, optimizer=None, step: int = 0, **meta) -> None:
    """Write model (and AdamW moments if an optimizer that has stepped is given) with header keys meta."""
    weights = {n: p.detach().cpu().numpy() for n, p in model.named_parameters()}
    moments = optimizer_moments(model, optimizer) if optimizer is not None else None
    m, v = moments if moments else (None, None)
    write_state(path, CheckpointState(model.config, step, weights, m, v, header=meta))


def load(path, device="cpu") -> tuple[TinyGPT, dict]:
    """(model, meta): meta is the header plus 'step' and, if present, 'state' for restore_optimizer."""
    state = read_state(path)
    meta = dict(state.header, step=state.step, state=state)
    return model_from_state(state, device), meta
