"""site/static/js/adapter_file.js under Node against python_ref/lora.py: LoRA adapter files (.tgla) cross
both ways (with and without AdamW moments), every damaged file that python_ref's read_adapter refuses is
refused in JS in the same words, an adapter on another base is refused for the same reason (base_problem),
and the writers refuse the same things alike. One Node process per batch (tests/site/hosts/adapter_file_driver.mjs)."""
from __future__ import annotations

import json
import math
import struct
import subprocess
import zlib

import numpy as np
import pytest
import torch

from conftest import ROOT
from python_ref.config import ModelConfig, model_config
from python_ref.lora import (
    AdapterFileError, LoRA, LoRAConfig, adapter_manifest, base_problem, base_weights_crc32, base_weights_sha256,
    read_adapter, save_adapter,
)
from python_ref.model import TinyGPT
from python_ref.tinygpt_file import PREFIX, encode_header

DRIVER = ROOT / "tests" / "site" / "hosts" / "adapter_file_driver.mjs"
CONFIG = model_config("tiny")
LORA = LoRAConfig(rank=4, alpha=8, targets=("q_proj", "v_proj", "fc_in"), seed=5)


def run_driver(jobs: list[dict]) -> dict:
    out = subprocess.run(["node", str(DRIVER)], input=json.dumps(jobs), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def trained(steps: int = 3, seed: int = 0):
    """A tiny base, LoRA adapters on it and their AdamW after `steps` steps on random batches."""
    model = TinyGPT(CONFIG, seed=seed)
    lora = LoRA(model, LORA)
    opt = torch.optim.AdamW(lora.parameters(), lr=1e-2, weight_decay=0.0)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        idx = torch.randint(0, 256, (4, CONFIG.ctx), generator=g)
        _, loss = lora(idx, torch.roll(idx, -1, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, lora, opt


def base_state(model) -> bytes:
    """The .tinygpt state of the base's weights (i32 step | f32 weights, manifest order)."""
    return struct.pack("<i", 0) + b"".join(np.ascontiguousarray(p.detach().numpy(), "<f4").tobytes()
                                            for p in model.parameters())


def adapter_state(f) -> bytes:
    """The adapter state (i32 step | adapters | [m | v]) of a read AdapterFile: what JS returns and takes."""
    blocks = [f.tensors] + ([f.m, f.v] if f.m is not None else [])
    arrays = (np.ascontiguousarray(a, "<f4").tobytes() for b in blocks for a in b)
    return struct.pack("<i", f.step or 0) + b"".join(arrays)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("adapters")
    model, lora, opt = trained()
    save_adapter(d / "moments.tgla", lora, opt, note="resumable", dataState={"seed": 5, "batchesDrawn": 3},
                 lossHistory=[[1, 5.5], [2, 5.25]], sample="r\u00e9sum\u00e9 \u2603")
    save_adapter(d / "plain.tgla", lora, note="adapters alone")
    (d / "base.state").write_bytes(base_state(model))
    return d, model, lora, opt


# ---------------------------------------------------------------- damaged files: same refusal, same words

def split(raw: bytes):
    n = PREFIX.unpack(raw[:12])[2]
    return json.loads(raw[12:12 + n]), raw[12 + n:]


def assemble(header: dict, data: bytes, data_crc: bool = False) -> bytes:
    header = dict(header)
    header.pop("headerCrc32", None)
    if data_crc:
        header["dataCrc32"] = f"{zlib.crc32(data):08x}"
    text = encode_header(header)
    return PREFIX.pack(b"TGLA", 1, len(text)) + text + data


def edited(raw: bytes, edit, data_crc: bool = False) -> bytes:
    header, data = split(raw)
    edit(header)
    return assemble(header, data, data_crc)


def with_float(raw: bytes, at: int, value) -> bytes:
    header, data = split(raw)
    floats = np.frombuffer(data, "<f4").copy()
    floats[at] = value
    return assemble(header, floats.tobytes(), data_crc=True)


def flipped(raw: bytes, at: int) -> bytes:
    b = bytearray(raw)
    b[at] ^= 0x10
    return bytes(b)


def damaged(raw: bytes, plain: bytes) -> dict[str, bytes]:
    header, _ = split(raw)
    Q = sum(math.prod(s) for _, s in adapter_manifest(CONFIG, LORA))
    first = dict(header["manifest"][0])

    def lora_with(**kw):
        return lambda h: h["lora"].update(kw)

    return {
        **{f"truncated at {cut}": raw[:cut] for cut in (0, 7, 11, 40, -1, -4)},
        "magic GGUF": b"GGUF" + raw[4:],
        "magic TGPT (a model checkpoint)": b"TGPT" + raw[4:],
        "version 9": raw[:4] + struct.pack("<I", 9) + raw[8:],
        "header byte flipped": flipped(raw, 20),
        "header CRC digit changed": raw.replace(f'"headerCrc32":"{header["headerCrc32"]}"'.encode(),
                                                f'"headerCrc32":"{"0" * 8}"'.encode()),
        "JSON not an object": PREFIX.pack(b"TGLA", 1, 8) + b"[1, 2] " + b" " + raw[12 + PREFIX.unpack(raw[:12])[2]:],
        **{f"{key} missing": edited(raw, lambda h, k=key: h.pop(k))
           for key in ("lora", "baseConfig", "manifest", "dataCrc32", "baseWeightsCrc32")},
        "lora a list": edited(raw, lambda h: h.update(lora=[4, 8])),
        "dataCrc32 a number": edited(raw, lambda h: h.update(dataCrc32=123)),
        "includesOptimizerState 'yes'": edited(raw, lambda h: h.update(includesOptimizerState="yes")),
        "includesOptimizerState null": edited(raw, lambda h: h.update(includesOptimizerState=None)),
        "includesOptimizerState false with moments": edited(raw, lambda h: h.update(includesOptimizerState=False)),
        "step -1": edited(raw, lambda h: h.update(step=-1)),
        "step 2^31": edited(raw, lambda h: h.update(step=2**31)),
        "step 1.5": edited(raw, lambda h: h.update(step=1.5)),
        "step '3'": edited(raw, lambda h: h.update(step="3")),
        "step true": edited(raw, lambda h: h.update(step=True)),
        "step missing beside moments": edited(raw, lambda h: h.pop("step")),
        "baseWeightsSha256 63 digits": edited(raw, lambda h: h.update(baseWeightsSha256="0" * 63)),
        "baseWeightsSha256 uppercase": edited(raw, lambda h: h.update(baseWeightsSha256="A" * 64)),
        "lora without seed": edited(raw, lambda h: h["lora"].pop("seed")),
        "lora rank 0": edited(raw, lora_with(rank=0)),
        "lora rank 4.5": edited(raw, lora_with(rank=4.5)),
        "lora rank 5": edited(raw, lora_with(rank=5)),
        "lora alpha 0": edited(raw, lora_with(alpha=0)),
        "lora alpha '8'": edited(raw, lora_with(alpha="8")),
        "lora targets repeated": edited(raw, lora_with(targets=["q_proj", "q_proj"])),
        "lora targets unknown": edited(raw, lora_with(targets=["q_proj", "w_proj"])),
        "lora targets a string": edited(raw, lora_with(targets="q_proj")),
        "lora targets empty": edited(raw, lora_with(targets=[])),
        "lora seed -1": edited(raw, lora_with(seed=-1)),
        "lora seed true": edited(raw, lora_with(seed=True)),
        "lora seed 2^53": edited(raw, lora_with(seed=2**53)),
        "lora targets reordered (canonical)": edited(raw, lora_with(targets=["fc_in", "v_proj", "q_proj"])),
        "baseConfig nHead 5": edited(raw, lambda h: h["baseConfig"].update(nHead=5)),
        "baseConfig without ctx": edited(raw, lambda h: h["baseConfig"].pop("ctx")),
        "baseConfig nLayer 10^9": edited(raw, lambda h: h["baseConfig"].update(nLayer=10**9)),
        "manifest shape reversed": edited(raw, lambda h: h["manifest"][0].update(shape=first["shape"][::-1])),
        "manifest offset 1": edited(raw, lambda h: h["manifest"][0].update(offset=1)),
        "manifest shape true": edited(raw, lambda h: h["manifest"][0].update(shape=[True, first["shape"][1]])),
        "manifest entry with an extra key": edited(raw, lambda h: h["manifest"][0].update(dtype="f32")),
        "manifest one short": edited(raw, lambda h: h["manifest"].pop()),
        "manifest entry a string": edited(raw, lambda h: h["manifest"].__setitem__(0, first["name"])),
        "data byte flipped": flipped(raw, len(raw) - 3),
        "dataCrc32 uppercase": edited(raw, lambda h: h.update(dataCrc32="DEADBEEF")),
        "NaN in an adapter": with_float(raw, 7, np.nan),
        "inf in AdamW m": with_float(raw, Q + 3, np.inf),
        "negative AdamW v": with_float(raw, 2 * Q + 11, -1e-6),
        "4 bytes too long": raw + b"\0\0\0\0",
        "plain file, 4 bytes short": plain[:-4],
    }


# Found only with the data bytes: readAdapterHeader (listing without the data) accepts these files.
DATA_LEVEL = ("adapter data CRC32 mismatch", "adapter holds non-finite", "negative value in an adapter's")
BOTH_ACCEPT = {"lora targets reordered (canonical)"}  # the manifest is the same: both readers put targets in order


@pytest.fixture(scope="module")
def refusals(files, tmp_path_factory):
    d, *_ = files
    out = tmp_path_factory.mktemp("damaged")
    cases = damaged((d / "moments.tgla").read_bytes(), (d / "plain.tgla").read_bytes())
    python, jobs = {}, []
    for i, (name, raw) in enumerate(cases.items()):
        path = out / f"{i}.tgla"
        path.write_bytes(raw)
        try:
            read_adapter(path)
            python[name] = None
        except AdapterFileError as e:
            python[name] = str(e)
        jobs += [{"id": f"read {name}", "op": "read", "in": str(path), "out": str(out / f"{i}.state")},
                 {"id": f"header {name}", "op": "readHeader", "in": str(path)}]
    return python, run_driver(jobs)


def test_js_refuses_every_damaged_adapter_that_python_refuses_in_the_same_words(refusals):
    python, js = refusals
    checked = 0
    for name, py in python.items():
        got, listed = js[f"read {name}"], js[f"header {name}"]
        if name in BOTH_ACCEPT:
            assert py is None and "error" not in got and "error" not in listed, (name, py, got)
            print(f"{name}: both readers accept it")
            continue
        assert py is not None, f"python_ref accepted {name}"
        print(f"{name}:\n  python: {py}\n  JS:     {got.get('error')}")
        assert got.get("errorName") == "AdapterFileError", (name, got)
        assert got["error"] == py, name
        if py.startswith(DATA_LEVEL):
            assert "error" not in listed, (name, listed)
        else:
            assert listed.get("error") == py, (name, listed)
        checked += 1
    print(f"{checked} damaged adapter files: refused alike, in the same words, by python_ref and JS")
    assert checked == len(python) - len(BOTH_ACCEPT) >= 55


# ---------------------------------------------------------------- files crossing both ways

def test_python_written_adapters_read_in_js(files, tmp_path):
    d, model, lora, opt = files
    jobs = [{"id": name, "op": "read", "in": str(d / f"{name}.tgla"), "out": str(tmp_path / f"{name}.state")}
            for name in ("moments", "plain")]
    r = run_driver(jobs)
    for name in ("moments", "plain"):
        py = read_adapter(d / f"{name}.tgla")
        got = r[name]
        state = (tmp_path / f"{name}.state").read_bytes()
        print(f"{name}: JS state {len(state)} bytes, step {got['step']}, Q {got['Q']}; identical to python_ref's: "
              f"{state == adapter_state(py)}")
        assert state == adapter_state(py)
        assert got["header"] == py.header and got["lora"] == py.config.to_json()
        assert got["baseConfig"] == py.base_config.to_json()
        assert got["includesOptimizerState"] == (py.m is not None) and got["step"] == py.step


def test_js_written_adapters_read_in_python(files, tmp_path):
    d, model, lora, opt = files
    py = read_adapter(d / "moments.tgla")
    meta = {"note": "from JS", "dataState": {"seed": 5, "batchesDrawn": 3}, "lossHistory": [[1, 5.5]],
            "training": {"lr": 1e-3, "weightDecay": 0}, "sample": "r\u00e9sum\u00e9 \u2603"}
    full = adapter_state(py)
    Q = sum(t.size for t in py.tensors)
    (tmp_path / "full.state").write_bytes(full)
    (tmp_path / "plain.state").write_bytes(full[:4 + 4 * Q])
    common = {"op": "write", "baseConfig": CONFIG.to_json(), "lora": LORA.to_json(),
              "baseCrc32": base_weights_crc32(model), "baseSha256": base_weights_sha256(model), "header": meta}
    r = run_driver([{"id": "moments", **common, "in": str(tmp_path / "full.state"), "out": str(tmp_path / "m.tgla")},
                    {"id": "plain", **common, "in": str(tmp_path / "plain.state"), "out": str(tmp_path / "p.tgla")}])
    assert r == {"moments": {}, "plain": {}}, r
    back = read_adapter(tmp_path / "m.tgla")  # every check of python_ref's reader
    assert back.step == py.step == 3 and base_problem(back, model) is None
    for block in ("tensors", "m", "v"):
        for a, b in zip(getattr(back, block), getattr(py, block)):
            assert np.array_equal(a, b)
    assert all(back.header[k] == v for k, v in meta.items())
    assert back.header["includesOptimizerState"] is True and back.header["lora"] == LORA.to_json()
    plain = read_adapter(tmp_path / "p.tgla")
    assert plain.m is None and "step" not in plain.header
    assert all(np.array_equal(a, b) for a, b in zip(plain.tensors, py.tensors))
    # the data is byte for byte python_ref's, and so is the header but for the keys each writer adds in its place
    assert split((tmp_path / "m.tgla").read_bytes())[1] == split((d / "moments.tgla").read_bytes())[1]
    print(f"JS-written adapters: {(tmp_path / 'm.tgla').stat().st_size} bytes with moments, "
          f"{(tmp_path / 'p.tgla').stat().st_size} without; python_ref reads both, tensors bitwise equal")


def test_an_adapter_on_another_base_is_refused_for_the_same_reason(files, tmp_path):
    d, model, lora, opt = files
    other_weights = TinyGPT(CONFIG, seed=1)
    other_shape = TinyGPT(ModelConfig(nLayer=2, nHead=3, dModel=48, ctx=16), seed=0)
    raw = (d / "moments.tgla").read_bytes()
    (tmp_path / "sha.tgla").write_bytes(edited(raw, lambda h: h.update(baseWeightsSha256="0" * 64)))
    bases = {"its own base": model, "other weights": other_weights, "another shape": other_shape}
    jobs = []
    for i, (name, m) in enumerate(bases.items()):
        (tmp_path / f"{i}.state").write_bytes(base_state(m))
        jobs.append({"id": name, "op": "base", "in": str(d / "moments.tgla"), "base": m.config.to_json(),
                     "baseState": str(tmp_path / f"{i}.state")})
    jobs.append({"id": "same CRC-32, other SHA-256", "op": "base", "in": str(tmp_path / "sha.tgla"),
                 "base": CONFIG.to_json(), "baseState": str(tmp_path / "0.state")})
    r = run_driver(jobs)
    want = {name: base_problem(read_adapter(d / "moments.tgla"), m) for name, m in bases.items()}
    want["same CRC-32, other SHA-256"] = base_problem(read_adapter(tmp_path / "sha.tgla"), model)
    for name, py in want.items():
        print(f"{name}:\n  python: {py}\n  JS:     {r[name].get('problem')}")
        assert r[name].get("problem") == py, r[name]
    assert want["its own base"] is None and all(want[k] for k in want if k != "its own base")
    assert r["its own base"]["identity"] == {"crc32": base_weights_crc32(model), "sha256": base_weights_sha256(model)}


def test_js_writer_refuses_what_python_refuses_in_the_same_words(files, tmp_path):
    d, model, lora, opt = files
    with torch.no_grad():
        saved = lora.lora_A[1][0, 0].item()
        lora.lora_A[1][0, 0] = float("nan")
    try:
        with pytest.raises(AdapterFileError) as nan:
            save_adapter(tmp_path / "nan.tgla", lora)
    finally:
        with torch.no_grad():
            lora.lora_A[1][0, 0] = saved
    with pytest.raises(AdapterFileError) as step:
        save_adapter(tmp_path / "step.tgla", lora, opt, step=5)
    py = read_adapter(d / "moments.tgla")
    state = bytearray(adapter_state(py))
    Q = sum(t.size for t in py.tensors)
    at = 4 + 4 * sum(t.size for t in py.tensors[:2])  # blocks.0.attn.v_proj.lora_A[0, 0]
    nan_state = bytes(state[:4 + 4 * Q])
    nan_state = nan_state[:at] + struct.pack("<f", float("nan")) + nan_state[at + 4:]
    (tmp_path / "nan.state").write_bytes(nan_state)
    (tmp_path / "full.state").write_bytes(bytes(state))
    common = {"op": "write", "baseConfig": CONFIG.to_json(), "lora": LORA.to_json(), "baseCrc32": "0" * 8,
              "baseSha256": "0" * 64}
    r = run_driver([
        {"id": "NaN", **common, "in": str(tmp_path / "nan.state"), "out": str(tmp_path / "x"), "header": {}},
        {"id": "step", **common, "in": str(tmp_path / "full.state"), "out": str(tmp_path / "y"), "header": {"step": 5}},
        {"id": "NaN in the header", **common, "in": str(tmp_path / "full.state"), "out": str(tmp_path / "z"),
         "header": {}, "numbers": {"finalLoss": "NaN"}},
    ])
    with pytest.raises(Exception) as header_nan:
        save_adapter(tmp_path / "h.tgla", lora, finalLoss=math.nan)
    for name, py_error in (("NaN", nan.value), ("step", step.value), ("NaN in the header", header_nan.value)):
        print(f"{name}:\n  python: {py_error}\n  JS:     {r[name].get('error')}")
        assert r[name].get("error") == str(py_error)
