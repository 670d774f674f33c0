"""Reader and writer of .tinygpt checkpoints (spec: docs/format.md).

"TGPT" | u32 LE version 2 | u32 LE header length N | N bytes UTF-8 JSON | state
state = i32 LE step | all weights (manifest order) | [all AdamW m | all AdamW v]   (float32 LE)
or, with header "weightsDtype": "float16", the compact weights-only form:
state = i32 LE step | all weights as float16 LE | [2 zero bytes if the parameter count is odd]
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .config import ConfigError, ModelConfig
from .header_checks import HeaderError, check_preset, check_values, depth_message, json_number, too_deep
from .model import TinyGPT, manifest
from .safe_files import atomic_write  # noqa: F401  (lora.py writes adapter files through it too)

MAGIC = b"TGPT"
VERSION = 2
PREFIX = struct.Struct("<4sII")
CRC_PLACEHOLDER = "00000000"
_HEADER_CRC_FIELD = re.compile(rb'"headerCrc32"\s*:\s*"([0-9a-f]{8})"')
_READ_CHUNK = 1 << 24
WEIGHTS_DTYPES = ("float32", "float16")


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


def crc32_arrays(arrays, crc: int = 0) -> int:
    for a in arrays:
        crc = zlib.crc32(memoryview(np.ascontiguousarray(a, dtype="<f4")).cast("B"), crc)
    return crc


def encode_header(header: dict) -> bytes:
    """JSON padded with spaces so that the data after the 12-byte prefix starts 4-byte aligned,
    with "headerCrc32" = CRC-32 of these bytes taken while the field reads "00000000"."""
    header = dict(header, headerCrc32=CRC_PLACEHOLDER)
    try:
        text = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as e:  # NaN/inf or an object JSON cannot hold: refuse before writing
        raise TinyGPTFileError(f"refusing to save: header metadata is not plain JSON ({e})") from None
    text += b" " * (-(PREFIX.size + len(text)) % 4)
    if len(_HEADER_CRC_FIELD.findall(text)) != 1:  # a nested one would make the file unreadable
        raise TinyGPTFileError("refusing to save: header metadata may not hold a key named 'headerCrc32'")
    field_ = f'"headerCrc32":"{CRC_PLACEHOLDER}"'.encode()
    return text.replace(field_, f'"headerCrc32":"{zlib.crc32(text):08x}"'.encode())


def decode_header(raw: bytes) -> dict:
    """Parse a header and check its headerCrc32 (in place: the 8 digits are read as "00000000")."""
    if (PREFIX.size + len(raw)) % 4:
        raise TinyGPTFileError(f"header length {len(raw)} leaves the data unaligned (12 + N must be a multiple of 4)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TinyGPTFileError("header JSON invalid: not UTF-8") from None
    try:
        header = json.loads(text, parse_constant=_refuse_constant, parse_int=json_number, parse_float=json_number)
    except RecursionError:  # JSON.parse nests deeper; both readers refuse by the same limit below
        raise TinyGPTFileError(depth_message()) from None
    except ValueError:  # the parsers' own wordings differ; the problem is the same
        raise TinyGPTFileError("header JSON invalid: not a JSON text") from None
    if too_deep(header):
        raise TinyGPTFileError(depth_message())
    if not isinstance(header, dict):
        raise TinyGPTFileError("header JSON invalid: expected an object")
    found = list(_HEADER_CRC_FIELD.finditer(raw))
    if len(found) != 1 or header.get("headerCrc32") != found[0].group(1).decode():
        raise TinyGPTFileError("header lacks a valid headerCrc32 field (exactly one, 8 lowercase hex digits)")
    start, end = found[0].span(1)
    crc = zlib.crc32(raw[:start] + CRC_PLACEHOLDER.encode() + raw[end:])
    if f"{crc:08x}" != header["headerCrc32"]:
        raise TinyGPTFileError("header CRC32 mismatch: the header is corrupt")
    return header


def _refuse_constant(name: str):
    """NaN and Infinity are not JSON: Python would accept them, JSON.parse in the browser would not."""
    raise ValueError(f"{name} is not valid JSON")


def write_state(path: str | Path, state: CheckpointState, dtype: str = "float32") -> None:
    """Atomic write: a temp file beside the target, then rename, so a failure never clobbers saved work.

    dtype "float16" writes the compact weights-only file (docs/format.md), rounded to nearest even.
    """
    entries = manifest_entries(state.config)
    blocks = [("weights", state.weights)]
    if dtype not in WEIGHTS_DTYPES:
        raise TinyGPTFileError(f"refusing to save: unknown weights dtype {dtype!r}; use 'float32' or 'float16'")
    if (state.m is None) != (state.v is None):
        raise TinyGPTFileError("refusing to save: AdamW m and v must be given together")
    if dtype == "float16" and state.m is not None:
        raise TinyGPTFileError("refusing to save: a float16 file holds weights only (no AdamW moments)")
    if state.m is not None:
        blocks += [("AdamW m", state.m), ("AdamW v", state.v)]
    arrays = []
    for what, block in blocks:
        for e in entries:
            if e["name"] not in block:
                raise TinyGPTFileError(f"refusing to save: {what} lack tensor {e['name']}")
            a = np.asarray(block[e["name"]], dtype=np.float32)
            if list(a.shape) != e["shape"]:
                raise TinyGPTFileError(
                    f"refusing to save: {what} of {e['name']} has shape {list(a.shape)}, "
                    f"the config implies {e['shape']}"
                )
            if not np.isfinite(a).all():
                raise TinyGPTFileError(f"refusing to save: {what} of {e['name']} holds NaN or infinity")
            arrays.append(to_float16(a, e["name"]) if dtype == "float16" else a.astype("<f4", copy=False))
    if dtype == "float16" and state.config.param_count() % 2:
        arrays.append(np.zeros(1, "<f2"))  # padding: the file length stays a multiple of 4
    if isinstance(state.step, bool) or not isinstance(state.step, int) or not 0 <= state.step < 2**31:
        raise TinyGPTFileError(f"refusing to save: step must be an integer in [0, 2^31), got {state.step!r}")
    step_bytes = struct.pack("<i", state.step)
    chunks = [memoryview(np.ascontiguousarray(a)).cast("B") for a in arrays]
    header = dict(state.header)
    header.pop("weightsDtype", None)  # absent means float32, so a float32 file is what it always was
    header.update(
        config=state.config.to_json(),
        manifest=entries,
        includesOptimizerState=state.m is not None,
        stateCrc32=f"{_crc32_chunks(chunks, zlib.crc32(step_bytes)):08x}",
    )
    if dtype == "float16":
        header["weightsDtype"] = "float16"
    header.setdefault("savedAt", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    text = encode_header(header)
    atomic_write(path, [PREFIX.pack(MAGIC, VERSION, len(text)), text, step_bytes] + chunks)


def to_float16(a: np.ndarray, name: str) -> np.ndarray:
    """float32 -> float16 LE, round to nearest even; refused where that rounding overflows to infinity
    (|w| >= 65520: 65504 is the largest finite float16, and everything below 65520 rounds to it)."""
    with np.errstate(over="ignore"):
        h = a.astype("<f2")
    if np.isinf(h).any():
        raise TinyGPTFileError(
            f"refusing to save: weights of {name} hold a value beyond the float16 range (largest finite 65504)"
        )
    return h


def _crc32_chunks(chunks, crc: int) -> int:
    for chunk in chunks:
        crc = zlib.crc32(chunk, crc)
    return crc


def _parse_header(raw: bytes) -> dict:
    header = decode_header(raw)
    for key, kind in (("config", dict), ("manifest", list), ("includesOptimizerState", bool), ("stateCrc32", str)):
        if not isinstance(header.get(key), kind):
            raise TinyGPTFileError(f"header key {key!r} is missing or not a {kind.__name__}")
    if not re.fullmatch(r"[0-9a-f]{8}", header["stateCrc32"]):
        raise TinyGPTFileError(f"header key 'stateCrc32' must be 8 lowercase hex digits, got {header['stateCrc32']!r}")
    dtype = header.get("weightsDtype", "float32")
    if dtype not in WEIGHTS_DTYPES:
        raise TinyGPTFileError(f"header key 'weightsDtype' must be 'float32' or 'float16', got {dtype!r}")
    if dtype == "float16" and header["includesOptimizerState"]:
        raise TinyGPTFileError("a float16 file holds weights only, but its includesOptimizerState is true")
    data_state = header.get("dataState")
    if data_state is not None and not (
        isinstance(data_state, dict)
        and all(_is_int(data_state.get(k)) and 0 <= data_state[k] < 2**53 for k in ("seed", "batchesDrawn"))
    ):
        raise TinyGPTFileError(
            f"header key 'dataState' must be {{seed, batchesDrawn}}, integers in [0, 2^53), got {data_state!r}"
        )
    try:
        check_values(header)
    except HeaderError as e:
        raise TinyGPTFileError(str(e)) from None
    return header


# No checkpoint this format is used for comes near this (behemoth with moments: 5.7 GB); a config
# implying more is wrong, and calling the file "truncated" would send the reader the wrong way.
PLAUSIBLE_STATE_BYTES = 2**40


def _shortfall(actual: int, expected: int) -> str:
    if actual >= expected:
        return ""
    if expected > PLAUSIBLE_STATE_BYTES:
        return " - the header's config is implausible (over 1 TiB of state), not the file truncated"
    return " - the file is truncated"


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _state_layout(count: int, blocks: int, dtype: str) -> tuple[str, int, str]:
    """(numpy dtype, elements stored after the step, description) of the state of count parameters.
    A float16 state of odd count ends with one zero float16 of padding (file length a multiple of 4)."""
    if dtype == "float16":
        return "<f2", count + count % 2, f"step + {count} float16{' + 2 bytes of padding' if count % 2 else ''}"
    return "<f4", count * blocks, f"step + {blocks} x {count} float32"


def _check_manifest(header: dict, expected: list[dict]) -> None:
    """The header's manifest must be exactly the config's (names, integer shapes and offsets)."""
    got = header["manifest"]
    if len(got) != len(expected):
        raise TinyGPTFileError(
            f"manifest/shape mismatch: {len(got)} tensors listed, the config implies {len(expected)}"
        )
    for i, (g, e) in enumerate(zip(got, expected)):
        if not isinstance(g, dict):
            raise TinyGPTFileError(
                f"manifest/shape mismatch: entry {i} is {g!r}, not an object {{name, shape, offset}}"
            )
        if g.get("name") != e["name"]:
            raise TinyGPTFileError(
                f"manifest/shape mismatch: found tensor {g.get('name')!r} where {e['name']!r} belongs"
            )
        shape, offset = g.get("shape"), g.get("offset")
        # 48.0 == 48 and True == 1 in Python: compare types too, so only the exact integers pass
        if not (isinstance(shape, list) and all(_is_int(d) for d in shape) and _is_int(offset)
                and shape == e["shape"] and offset == e["offset"]):
            raise TinyGPTFileError(
                f"manifest/shape mismatch: {e['name']} is listed as shape {shape!r} at offset "
                f"{offset!r}, the config implies {e['shape']} at {e['offset']}"
            )


def read_state(path: str | Path) -> CheckpointState:
    path = Path(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise TinyGPTFileError(f"{str(path)!r} does not exist") from None
    except OSError as e:
        raise TinyGPTFileError(f"{str(path)!r} cannot be read: {e.strerror or e}") from None
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
            check_preset(header, config)
        except (ConfigError, TypeError) as e:
            raise TinyGPTFileError(f"config in header invalid: {e}") from None
        except HeaderError as e:
            raise TinyGPTFileError(str(e)) from None
        # Length before manifest: the size check is arithmetic, while building the config's manifest
        # for an absurd nLayer would take unbounded time; after it, the manifest is bounded by the file.
        count = config.param_count()
        blocks = 3 if header["includesOptimizerState"] else 1
        dtype = header.get("weightsDtype", "float32")
        stored_dtype, stored_count, layout = _state_layout(count, blocks, dtype)
        expected = 4 + np.dtype(stored_dtype).itemsize * stored_count
        actual = size - PREFIX.size - n
        if actual != expected:
            raise TinyGPTFileError(f"state length mismatch: {actual} bytes after the header, expected {expected} "
                                   f"({layout}){_shortfall(actual, expected)}")
        entries = manifest_entries(config)
        _check_manifest(header, entries)
        step_bytes = f.read(4)
        flat = np.empty(stored_count, dtype=stored_dtype)
        view = memoryview(flat).cast("B")
        crc, pos = zlib.crc32(step_bytes), 0
        while pos < len(view):
            got = f.readinto(view[pos:pos + _READ_CHUNK])
            if not got:
                raise TinyGPTFileError("file is truncated: state ends early")
            crc = zlib.crc32(view[pos:pos + got], crc)
            pos += got
    if len(step_bytes) != 4 or f"{crc:08x}" != header["stateCrc32"]:
        raise TinyGPTFileError("state CRC32 mismatch: the weights are corrupt")
    step = struct.unpack("<i", step_bytes)[0]
    if step < 0:
        raise TinyGPTFileError(f"step is negative ({step})")
    if dtype == "float16":
        if flat[count:].view("<u2").any():
            raise TinyGPTFileError("float16 padding after the weights is not zero")
        flat = flat[:count].astype(np.float32)
    split = [{e["name"]: flat[b * count + e["offset"]: b * count + e["offset"] + math.prod(e["shape"])]
              .reshape(e["shape"]) for e in entries} for b in range(blocks)]
    for b, block in enumerate(split):
        for name, a in block.items():
            if not np.isfinite(a).all():
                what = ("weights", "AdamW m", "AdamW v")[b]
                raise TinyGPTFileError(f"non-finite value (NaN or infinity) in {what} of {name}")
            if b == 2 and (a < 0).any():  # a mean of squares: a resumed step would take its square root
                raise TinyGPTFileError(f"negative value in AdamW v of {name}: v is a mean of squares")
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


def save(path, model: TinyGPT, optimizer=None, step: int | None = None, dtype: str = "float32", **meta) -> None:
    """Write model (and AdamW moments if an optimizer that has stepped is given) with header keys meta.

    dtype "float16" writes the compact weights-only file; it refuses an optimizer's moments.

    step defaults to the optimizer's own step count (0 without one); a different explicit step is
    refused, because resuming would then bias-correct the moments with the wrong t.
    """
    weights = {n: p.detach().cpu().numpy() for n, p in model.named_parameters()}
    moments = optimizer_moments(model, optimizer) if optimizer is not None else None
    m, v = moments if moments else (None, None)
    optimizer_step = _optimizer_step(model, optimizer) if moments else 0
    if step is None:
        step = optimizer_step
    elif moments and step != optimizer_step:
        raise TinyGPTFileError(f"refusing to save: step {step} differs from the optimizer's step {optimizer_step}")
    write_state(path, CheckpointState(model.config, step, weights, m, v, header=meta), dtype)


def _optimizer_step(model: TinyGPT, optimizer) -> int:
    steps = {int(optimizer.state[p]["step"]) for p in model.parameters()}
    if len(steps) != 1:
        raise TinyGPTFileError(f"refusing to save: the optimizer's tensors disagree on the step ({sorted(steps)})")
    return steps.pop()


def load(path, device="cpu") -> tuple[TinyGPT, dict]:
    """(model, meta): meta is the header plus 'step' and, if present, 'state' for restore_optimizer."""
    state = read_state(path)
    meta = dict(state.header, step=state.step, state=state)
    return model_from_state(state, device), meta
