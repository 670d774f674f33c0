"""site/static/js/tinygpt_file.js under Node against python_ref/tinygpt_file.py: files cross both
ways bit for bit (float32 with and without moments, compact float16), float16 rounding equals
numpy's, and every corrupt file that the Python reader's tests refuse is refused in JS with the
same message. Each fixture runs one Node process for its whole batch (tests/site/hosts/tinygpt_file_driver.mjs)."""
import json
import math
import re
import struct
import subprocess
import zlib

import numpy as np
import pytest

from conftest import ROOT
from python_ref.config import ConfigError, ModelConfig, model_config
from python_ref.tinygpt_file import (PREFIX, CheckpointState, TinyGPTFileError, manifest_entries, read_state,
                                     write_state)
from support.tinygpt_files import (
    MICRO, ODD, assemble, bits, float16_edge_values, float16_file, float16_state_with, split_file, trained,
    valid_file, weights_with,
)

DRIVER = ROOT / "tests" / "site" / "hosts" / "tinygpt_file_driver.mjs"


def run_driver(jobs: list[dict]) -> dict:
    out = subprocess.run(["node", str(DRIVER)], input=json.dumps(jobs), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def python_refusal(path) -> str | None:
    try:
        read_state(path)
    except TinyGPTFileError as e:
        return str(e)
    return None


def state_bytes(step: int, *blocks: dict) -> bytes:
    """The float32 state (i32 step | blocks in manifest order) of python_ref arrays: what the JS reader
    returns and the JS writers take."""
    names = [name for name in blocks[0]]
    return struct.pack("<i", step) + b"".join(np.ascontiguousarray(b[n], "<f4").tobytes()
                                              for b in blocks for n in names)


# ---------------------------------------------------------------- corrupt files: same refusal, same words

def edited(raw: bytes, edit) -> bytes:
    header, state = split_file(raw)
    edit(header)
    return assemble(header, state)


def flipped(raw: bytes, at: int, mask: int) -> bytes:
    b = bytearray(raw)
    b[at] ^= mask
    return bytes(b)


def with_header_text(raw: bytes, text: bytes, extra_spaces: int = 0) -> bytes:
    text += b" " * ((-(12 + len(text)) % 4) + extra_spaces)
    return PREFIX.pack(b"TGPT", 2, len(text)) + text + split_file(raw)[1]


def nan_at(raw: bytes, at: int, value=np.nan) -> bytes:
    header, state = split_file(raw)
    floats = np.frombuffer(state[4:], dtype="<f4").copy()
    floats[at] = value
    return assemble(header, state[:4] + floats.tobytes(), state_crc=True)


def corruption_cases() -> dict[str, bytes]:
    """Every reader refusal of tests/python_ref/test_tinygpt_file.py (same edits), then the float16 ones."""
    raw, plain, f16 = valid_file(), valid_file(False), float16_file()
    f16_header, f16_state = split_file(f16)
    header_crc_at = raw.index(b'"sample":"hi"') + len(b'"sample":"')
    P = MICRO.param_count()
    cases = {f"truncated at {cut}": raw[:cut] for cut in (0, 7, 40, -1, -5000)}
    cases |= {
        "magic GGUF": b"GGUF" + raw[4:],
        "version 3": raw[:4] + struct.pack("<I", 3) + raw[8:],
        "JSON cut short": with_header_text(raw, b'{"config": '),
        "JSON array": with_header_text(raw, b"[1, 2, 3]"),
        "JSON not UTF-8": with_header_text(raw, b'{"a": "\xff\xfe"}'),
        "JSON NaN": with_header_text(raw, b'{"a": NaN}'),
        "JSON nested 100000 deep": with_header_text(raw, b"[" * 100_000 + b"]" * 100_000),
        "header unaligned": with_header_text(raw, json.dumps(split_file(raw)[0], separators=(",", ":")).encode(), 1),
        "header CRC mismatch": raw[:header_crc_at] + b"H" + raw[header_crc_at + 1:],
        "headerCrc32 missing": edited(raw, lambda h: h.pop("headerCrc32")),
        "state CRC mismatch": flipped(raw, len(raw) - 3, 0x10),
        "state 4 bytes too long": raw + b"\0\0\0\0",
        "includesOptimizerState false with moments": edited(raw, lambda h: h.update(includesOptimizerState=False)),
        "manifest shape [4, 2]": edited(raw, lambda h: h["manifest"][3].update(shape=[4, 2])),
        "manifest shape 256.0": edited(raw, lambda h: h["manifest"][0].update(shape=[256.0, 8])),
        "manifest offset false": edited(raw, lambda h: h["manifest"][0].update(offset=False)),
        "manifest offset + 1": edited(raw, lambda h: h["manifest"][4].update(offset=h["manifest"][4]["offset"] + 1)),
        "manifest reversed": edited(raw, lambda h: h["manifest"].reverse()),
        "manifest one short": edited(raw, lambda h: h["manifest"].pop()),
        "config nHead 3": edited(raw, lambda h: h["config"].update(nHead=3)),
        "config nLayer 4096": edited(raw, lambda h: h["config"].update(nLayer=4096)),
        "config nLayer 10^15": edited(raw, lambda h: h["config"].update(nLayer=10**15)),
        "config dModel '8'": edited(raw, lambda h: h["config"].update(dModel="8")),
        "config missing": edited(raw, lambda h: h.pop("config")),
        "includesOptimizerState 'yes'": edited(raw, lambda h: h.update(includesOptimizerState="yes")),
        "stateCrc32 zeros": edited(raw, lambda h: h.update(stateCrc32="0" * 8)),
        "stateCrc32 uppercase": edited(raw, lambda h: h.update(stateCrc32="ABCDEF01")),
        "manifest entry a string": edited(raw, lambda h: h["manifest"].__setitem__(0, "token_embedding.weight")),
        "config 4096 layers of 65536": edited(raw, lambda h: h["config"].update(nLayer=4096, dModel=65536)),
        "dataState without batchesDrawn": edited(raw, lambda h: h.update(dataState={"seed": 1})),
        "dataState seed 2^53": edited(raw, lambda h: h.update(dataState={"seed": 2**53, "batchesDrawn": 0})),
        "dataState seed true": edited(raw, lambda h: h.update(dataState={"seed": True, "batchesDrawn": 0})),
        "NaN in weights": nan_at(plain, 300),
        "NaN in AdamW v": nan_at(raw, 2 * P + 300),
        "negative AdamW v": nan_at(raw, 2 * P + 300, -1e-6),
        "negative step": assemble(split_file(plain)[0], struct.pack("<i", -4) + split_file(plain)[1][4:],
                                  state_crc=True),
        "float16 weightsDtype bfloat16": edited(f16, lambda h: h.update(weightsDtype="bfloat16")),
        "float16 weightsDtype null": edited(f16, lambda h: h.update(weightsDtype=None)),
        "float16 truncated": f16[:-2],
        "float16 with moments": edited(raw, lambda h: h.update(weightsDtype="float16")),
        "float16 label on a float32 file": edited(plain, lambda h: h.update(weightsDtype="float16")),
        "float16 NaN": assemble(f16_header, float16_state_with(f16_state, 300, 0x7E00), state_crc=True),
        "float16 -inf": assemble(f16_header, float16_state_with(f16_state, P - 1, 0xFC00), state_crc=True),
    }
    odd_header, odd_state = split_file(float16_file(ODD))
    cases["float16 padding not zero"] = assemble(odd_header, odd_state[:-2] + b"\1\0", state_crc=True)
    return cases


# JSON has one kind of number: both readers read 256.0 as 256 (python_ref/header_checks.py json_number).
BOTH_ACCEPT = {"manifest shape 256.0"}
# Found only with the state bytes: readHeader must accept these files.
STATE_LEVEL = ("state CRC32 mismatch", "non-finite value", "negative value in AdamW v", "step is negative",
               "float16 padding")


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory):
    d = tmp_path_factory.mktemp("corrupt")
    cases, jobs = {}, []
    for i, (name, raw) in enumerate(corruption_cases().items()):
        path = d / f"{i}.tinygpt"
        path.write_bytes(raw)
        cases[name] = python_refusal(path)
        jobs += [{"id": f"read {name}", "op": "read", "in": str(path), "out": str(d / f"{i}.state")},
                 {"id": f"header {name}", "op": "readHeader", "in": str(path)}]
    return cases, run_driver(jobs)


@pytest.mark.parametrize("name", list(corruption_cases()))
def test_js_refuses_what_python_refuses_in_the_same_words(corrupt, name):
    py_messages, js = corrupt
    py, got, listed = py_messages[name], js[f"read {name}"], js[f"header {name}"]
    if name in BOTH_ACCEPT:
        assert py is None and "error" not in got, (py, got)
        print(f"{name}: both readers accept it (8.0 is 8)")
        return
    assert py is not None, f"python_ref accepted {name}"
    print(f"{name}:\n  python: {py}\n  JS:     {got.get('error')}")
    assert got.get("errorName") == "TinyGPTFileError", got
    assert got["error"] == py
    # readHeader (listing without the state) refuses the same files in the same words, except those
    # only the state bytes can show.
    if py.startswith(STATE_LEVEL):
        assert "error" not in listed, listed
    else:
        assert listed.get("error") == got["error"], listed


def test_js_read_header_of_a_behemoth_file_uses_64_bit_lengths(tmp_path):
    """Sparse 5.68 GB files, one exact and one a float short: sizes past 2^32 must not wrap."""
    config = model_config("behemoth")
    header = {"config": config.to_json(), "manifest": manifest_entries(config), "includesOptimizerState": True,
              "stateCrc32": "00000000", "headerCrc32": "00000000"}
    prefix = assemble(header, b"")
    jobs = []
    for name, state_len in (("exact", 4 + 12 * config.param_count()), ("short", 4 + 12 * config.param_count() - 4)):
        with open(tmp_path / name, "wb") as f:
            f.write(prefix)
            f.truncate(len(prefix) + state_len)
        jobs.append({"id": name, "op": "readHeader", "in": str(tmp_path / name)})
    r = run_driver(jobs)
    py = python_refusal(tmp_path / "short")
    print(f"exact: stateLength {r['exact'].get('stateLength')}")
    print(f"short: python {py}\n       JS     {r['short'].get('error')}")
    assert r["exact"]["stateLength"] == 5678929924 and r["exact"]["stateOffset"] == len(prefix)
    assert r["short"]["error"] == py and "5678929920 bytes after the header, expected 5678929924" in py


# ---------------------------------------------------------------- files crossing both ways

def model_arrays(config: ModelConfig):
    model, opt = trained(config)
    w = {n: p.detach().numpy() for n, p in model.named_parameters()}
    m = {n: opt.state[p]["exp_avg"].numpy() for n, p in model.named_parameters()}
    v = {n: opt.state[p]["exp_avg_sq"].numpy() for n, p in model.named_parameters()}
    return w, m, v


def test_python_written_files_read_in_js(tmp_path):
    w, m, v = model_arrays(MICRO)
    meta = dict(dataState={"seed": 5, "batchesDrawn": 3}, lossHistory=[[1, 5.5]], sample="ROMEO: \u00e9\u2603",
                training={"lr": 1e-2, "eps": 1e-8})
    odd = weights_with(ODD, float16_edge_values())
    files = {
        "float32 with moments": (CheckpointState(MICRO, 3, w, m, v, header=meta), "float32"),
        "float32 weights only": (CheckpointState(MICRO, 3, w, header=meta), "float32"),
        "float16": (CheckpointState(MICRO, 3, w, header=meta), "float16"),
        "float16 odd P": (CheckpointState(ODD, 9, odd), "float16"),
    }
    jobs = []
    for i, (name, (state, dtype)) in enumerate(files.items()):
        write_state(tmp_path / f"{i}.tinygpt", state, dtype)
        jobs += [{"id": name, "op": "read", "in": str(tmp_path / f"{i}.tinygpt"), "out": str(tmp_path / f"{i}.state")},
                 {"id": "header " + name, "op": "readHeader", "in": str(tmp_path / f"{i}.tinygpt")}]
    r = run_driver(jobs)
    for i, (name, (state, dtype)) in enumerate(files.items()):
        py = read_state(tmp_path / f"{i}.tinygpt")
        got, got_state = r[name], (tmp_path / f"{i}.state").read_bytes()
        want_state = state_bytes(py.step, py.weights, *((py.m, py.v) if py.m is not None else ()))
        diff = np.abs(np.frombuffer(got_state[4:], "<f4") - np.frombuffer(want_state[4:], "<f4")).max()
        print(f"{name}: JS state {len(got_state)} bytes, identical to python_ref's: {got_state == want_state}, "
              f"max |diff| {diff}")
        assert got_state == want_state
        if dtype == "float32":
            assert got_state == split_file((tmp_path / f"{i}.tinygpt").read_bytes())[1]
        assert got["header"] == py.header and got["config"] == py.config.to_json()
        assert (got["step"], got["includesOptimizerState"], got["weightsDtype"]) == (py.step, py.m is not None, dtype)
        listed = r["header " + name]
        assert listed["header"] == py.header and listed["step"] is None and listed["weightsDtype"] == dtype


def test_js_written_files_read_in_python(tmp_path):
    w, m, v = model_arrays(MICRO)
    odd = weights_with(ODD, float16_edge_values())
    meta = {"dataState": {"seed": 5, "batchesDrawn": 3}, "sample": "ROMEO: \u00e9\u2603", "lossHistory": [[1, 5.5]],
            "training": {"lr": 1e-2, "eps": 1e-8}, "weightsDtype": "float16"}  # a stale weightsDtype is replaced
    files = {  # name: (config, step, blocks, fp16)
        "float32 with moments": (MICRO, 3, (w, m, v), False),
        "float32 weights only": (MICRO, 3, (w,), False),
        "float16": (MICRO, 3, (w,), True),
        "float16 odd P": (ODD, 9, (odd,), True),
    }
    jobs = []
    for i, (name, (config, step, blocks, fp16)) in enumerate(files.items()):
        (tmp_path / f"{i}.state").write_bytes(state_bytes(step, *blocks))
        jobs.append({"id": name, "op": "write", "in": str(tmp_path / f"{i}.state"),
                     "out": str(tmp_path / f"{i}.tinygpt"), "config": config.to_json(), "header": meta, "fp16": fp16})
    r = run_driver(jobs)
    for i, (name, (config, step, blocks, fp16)) in enumerate(files.items()):
        assert r[name] == {}, r[name]
        raw = (tmp_path / f"{i}.tinygpt").read_bytes()
        back = read_state(tmp_path / f"{i}.tinygpt")  # every check of the Python reader
        assert back.step == step and (back.m is not None) == (len(blocks) == 3)
        worst = 0.0
        for block, arrays in zip(("weights", "m", "v"), blocks):
            for n, a in arrays.items():
                want = a.astype(np.float16).astype(np.float32) if fp16 else a
                got = getattr(back, block)[n]
                assert np.array_equal(bits(got), bits(want)), (name, block, n)
                worst = max(worst, float((np.abs(got - a) / np.maximum(np.abs(a), 2.0**-14)).max()))
        print(f"{name}: {len(raw)} bytes; python_ref reads back the {'float16-rounded ' if fp16 else ''}arrays "
              f"bitwise; max relative diff to the float32 source {worst:.2e}")
        assert back.header.get("weightsDtype", "float32") == ("float16" if fp16 else "float32")
        assert all(back.header[k] == meta[k] for k in ("dataState", "sample", "lossHistory", "training"))
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", back.header["savedAt"])
        assert len(raw) % 4 == 0 and raw.count(b'"headerCrc32":"') == 1
        if fp16:  # the stored state is byte for byte what python_ref writes for the same weights
            write_state(tmp_path / "py.tinygpt", CheckpointState(config, step, blocks[0]), "float16")
            assert split_file(raw)[1] == split_file((tmp_path / "py.tinygpt").read_bytes())[1]


def python_write_refusal(tmp_path, state: CheckpointState, dtype: str = "float32") -> str:
    with pytest.raises(TinyGPTFileError) as e:
        write_state(tmp_path / "refused.tinygpt", state, dtype)
    return str(e.value)


def test_js_writers_refuse_what_python_refuses_in_the_same_words(tmp_path):
    w, m, v = model_arrays(MICRO)
    nan = dict(w, **{"blocks.0.mlp.fc_in.weight": w["blocks.0.mlp.fc_in.weight"].copy()})
    nan["blocks.0.mlp.fc_in.weight"][1, 2] = np.nan
    nan_m = dict(m, **{"ln_f.bias": np.full(8, np.inf, np.float32)})
    big = dict(w, **{"blocks.0.ln2.bias": np.full(8, 65520.0, np.float32)})
    nested = {"training": {"headerCrc32": "0123abcd"}}
    cases = {  # name: (state, header, fp16, python's refusal)
        "NaN in weights": (state_bytes(0, nan), {}, False,
                           python_write_refusal(tmp_path, CheckpointState(MICRO, 0, nan))),
        "inf in AdamW m": (state_bytes(3, w, nan_m, v), {}, False,
                           python_write_refusal(tmp_path, CheckpointState(MICRO, 3, w, nan_m, v))),
        "negative step": (state_bytes(-1, w), {}, False, python_write_refusal(tmp_path, CheckpointState(MICRO, -1, w))),
        "NaN in the header": (state_bytes(0, w), {}, False,
                              python_write_refusal(tmp_path,
                                                   CheckpointState(MICRO, 0, w, header={"finalLoss": math.nan}))),
        "nested headerCrc32": (state_bytes(0, w), nested, False,
                               python_write_refusal(tmp_path, CheckpointState(MICRO, 0, w, header=nested))),
        "float16 overflow": (state_bytes(0, big), {}, True,
                             python_write_refusal(tmp_path, CheckpointState(MICRO, 0, big), "float16")),
        "float16 with moments": (state_bytes(3, w, m, v), {}, True,
                                 python_write_refusal(tmp_path, CheckpointState(MICRO, 3, w, m, v), "float16")),
    }
    jobs = []
    for i, (name, (state, header, fp16, _)) in enumerate(cases.items()):
        (tmp_path / f"{i}.state").write_bytes(state)
        jobs.append({"id": name, "op": "write", "in": str(tmp_path / f"{i}.state"), "out": str(tmp_path / f"{i}.out"),
                     "config": MICRO.to_json(), "header": header, "fp16": fp16})
    jobs[3]["numbers"] = {"finalLoss": "NaN"}  # JSON cannot carry a NaN to the driver
    r = run_driver(jobs)
    for name, (_, _, _, py) in cases.items():
        got = r[name]
        print(f"{name}:\n  python: {py}\n  JS:     {got.get('error')}")
        assert got.get("errorName") == "TinyGPTFileError", got
        assert got["error"] == py


# ---------------------------------------------------------------- float16 rounding, CRC, config

def test_f32_to_f16_equals_numpy_bitwise_and_refuses_overflow(tmp_path):
    rng = np.random.default_rng(7)
    n = 1 << 20
    random = (rng.standard_normal(n) * 10.0 ** rng.uniform(-10, 4.8, n)).astype(np.float32)
    every_f16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite16 = every_f16[np.isfinite(every_f16)].astype(np.float32)
    # exact midpoints between neighbouring float16 values: ties, all of them exactly representable in float32
    ties = ((finite16[:-1].astype(np.float64) + finite16[1:]) / 2).astype(np.float32)
    f32_bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)  # any float32
    values = np.concatenate([random, float16_edge_values(), finite16, ties, f32_bits])
    with np.errstate(over="ignore", invalid="ignore"):
        want = values.astype(np.float16)
    keep = np.isfinite(want)  # numpy's infinities are the overflows JS refuses (tested below)
    values, want = values[keep], want[keep]
    (tmp_path / "f32").write_bytes(values.astype("<f4").tobytes())
    (tmp_path / "f16").write_bytes(np.arange(1 << 16, dtype="<u2").tobytes())
    jobs = [{"id": "toF16", "op": "toF16", "in": str(tmp_path / "f32"), "out": str(tmp_path / "got16")},
            {"id": "fromF16", "op": "fromF16", "in": str(tmp_path / "f16"), "out": str(tmp_path / "got32")}]
    for i, beyond in enumerate((65520.0, -65520.0, 65535.0, 1e38, float(np.finfo(np.float32).max))):
        (tmp_path / f"big{i}").write_bytes(np.array([1.0, beyond], "<f4").tobytes())
        jobs.append({"id": f"overflow {beyond}", "op": "toF16", "in": str(tmp_path / f"big{i}"),
                     "out": str(tmp_path / "never"), "name": "blocks.3.mlp.fc_in.weight"})
    r = run_driver(jobs)
    got = np.frombuffer((tmp_path / "got16").read_bytes(), "<u2")
    mismatches = int((got != want.view(np.uint16)).sum())
    diff = np.abs(got.view("<f2").astype(np.float64) - want.astype(np.float64)).max()
    print(f"f32ToF16Bits: {values.size} values ({ties.size} ties, {int((np.abs(want) < 2**-14).sum())} "
          f"subnormal or zero results): {mismatches} bit mismatches vs numpy, max |diff| {diff}")
    assert mismatches == 0
    back = np.frombuffer((tmp_path / "got32").read_bytes(), "<f4")
    every32 = every_f16.astype(np.float32)
    nan, finite = np.isnan(every32), np.isfinite(every32)
    print(f"f16BitsToF32: all 65536 patterns, max |diff| vs numpy {np.abs(back[finite] - every32[finite]).max()}, "
          f"NaNs {int(np.isnan(back).sum())} (numpy {int(nan.sum())})")
    assert np.array_equal(bits(back[~nan]), bits(every32[~nan])) and np.array_equal(np.isnan(back), nan)
    for key, result in r.items():
        if key.startswith("overflow"):
            print(f"{key}: {result.get('error')}")
            assert result == {"errorName": "TinyGPTFileError", "error": "refusing to save: weights of "
                              "blocks.3.mlp.fc_in.weight hold a value beyond the float16 range (largest finite 65504)"}


def test_crc32_equals_zlib_whole_and_incremental(tmp_path):
    data = np.random.default_rng(1).integers(0, 256, 100_003, dtype=np.uint8).tobytes()
    (tmp_path / "d").write_bytes(data)
    splits = (0, 1, 4097, 100_003)
    r = run_driver([{"id": f"split {k}", "op": "crc32", "in": str(tmp_path / "d"), "split": k} for k in splits])
    want = zlib.crc32(data)
    print(f"crc32 of 100003 bytes: zlib {want:08x}, JS {r['split 0']['whole']:08x}")
    assert all(x == {"whole": want, "incremental": want} for x in r.values())


CONFIGS = {
    "micro": MICRO.to_json(),
    "odd": ODD.to_json(),
    "behemoth": model_config("behemoth").to_json(),
    "defaults filled in": {"nLayer": 1, "nHead": 2, "dModel": 8, "ctx": 4},
    "nHead 3": {"nLayer": 1, "nHead": 3, "dModel": 8, "ctx": 4},
    "dModel '8'": {"nLayer": 1, "nHead": 2, "dModel": "8", "ctx": 4},
    "nLayer true": {"nLayer": True, "nHead": 2, "dModel": 8, "ctx": 4},
    "vocabSize 0": {"nLayer": 1, "nHead": 2, "dModel": 8, "ctx": 4, "vocabSize": 0},
    "layerNormEps 0": {"nLayer": 1, "nHead": 2, "dModel": 8, "ctx": 4, "layerNormEps": 0},
    "layerNormEps null": {"nLayer": 1, "nHead": 2, "dModel": 8, "ctx": 4, "layerNormEps": None},
    "lacks nHead, ctx": {"nLayer": 1, "dModel": 8},
    "a list": [1, 2, 8, 4],
}


def test_config_checks_param_count_and_manifest_equal_python_ref():
    r = run_driver([{"id": name, "op": "manifest", "config": c} for name, c in CONFIGS.items()])
    for name, c in CONFIGS.items():
        try:
            config = ModelConfig.from_json(c)
        except ConfigError as e:
            print(f"{name}: python {e}\n{' ' * len(name)}  JS     {r[name].get('error')}")
            assert r[name]["error"] == str(e)
            continue
        assert r[name]["config"] == config.to_json()
        assert r[name]["paramCount"] == config.param_count() and r[name]["manifest"] == manifest_entries(config)
    print(f"behemoth: {r['behemoth']['paramCount']} parameters, {len(r['behemoth']['manifest'])} tensors, "
          "as python_ref")
