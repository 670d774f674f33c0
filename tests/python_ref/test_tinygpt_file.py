"""python_ref/tinygpt_file.py: bit-exact round trip, the layout of docs/format.md, every refusal,
and a hypothesis fuzz proving that a damaged file is either refused with TinyGPTFileError or read
back identical (nothing else escapes, nothing altered is silently accepted)."""
import json
import math
import re
import struct
import tempfile
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from python_ref import cli
from python_ref.config import DEFAULT_CORPUS, ModelConfig
from python_ref.data import Corpus
from python_ref.evaluate import val_windows_loss
from python_ref.model import TinyGPT
from python_ref.tinygpt_file import (
    PREFIX, CheckpointState, TinyGPTFileError, load, manifest_entries, read_state, restore_optimizer, save,
    write_state,
)

from support.tinygpt_files import (
    MICRO, ODD, assemble, bits, float16_edge_values, float16_file, float16_state_with, split_file, trained, valid_file,
    weights_with,
)

SMALLISH = ModelConfig(nLayer=2, nHead=2, dModel=16, ctx=8)
REQUIRED = {"config", "manifest", "includesOptimizerState", "stateCrc32", "headerCrc32"}


def write(path: Path, raw: bytes) -> Path:
    path.write_bytes(raw)
    return path


# ---------------------------------------------------------------- round trip and layout

def test_round_trip_bit_exact_with_adamw_moments(tmp_path):
    model, opt = trained(SMALLISH)
    meta = dict(preset=None, dataState={"seed": 11, "batchesDrawn": 3}, lossHistory=[[1, 5.5], [3, 5.25]],
                valHistory=[[3, 5.4]], finalLoss=5.25, bestVal=5.4, sample="ROMEO: \u00e9",
                corpus={"name": "t.txt", "bytes": 10, "sha256": "ab" * 32}, training={"lr": 1e-2, "seed": 11})
    save(tmp_path / "a.tinygpt", model, opt, **meta)
    loaded, got = load(tmp_path / "a.tinygpt")
    assert got["step"] == 3 and got["includesOptimizerState"] is True
    for key, value in meta.items():
        assert got[key] == value, key
    worst = 0
    for (name, p), (_, q) in zip(model.named_parameters(), loaded.named_parameters()):
        st_ = opt.state[p]
        worst = max(worst, (p - q).abs().max().item())
        assert np.array_equal(bits(p.detach()), bits(q.detach())), name
        assert np.array_equal(bits(st_["exp_avg"]), bits(got["state"].m[name])), name
        assert np.array_equal(bits(st_["exp_avg_sq"]), bits(got["state"].v[name])), name
    print(f"round trip: max |weight difference| = {worst}")

    # The restored optimizer takes the next step exactly as the original one does.
    opt2 = torch.optim.AdamW([{"params": [p for p in loaded.parameters() if p.dim() >= 2], "weight_decay": 0.1},
                              {"params": [p for p in loaded.parameters() if p.dim() < 2], "weight_decay": 0.0}],
                             lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    restore_optimizer(loaded, opt2, got["state"])
    idx = torch.randint(0, 256, (2, SMALLISH.ctx), generator=torch.Generator().manual_seed(99))
    for m, o in ((model, opt), (loaded, opt2)):
        _, loss = m(idx, idx)
        o.zero_grad()
        loss.backward()
        o.step()
    diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), loaded.parameters()))
    print(f"next AdamW step after restore: max |weight difference| = {diff}")
    assert diff == 0


def test_weights_only_file_and_state_sizes(tmp_path):
    model = TinyGPT(MICRO, seed=1)
    save(tmp_path / "w.tinygpt", model)
    raw = (tmp_path / "w.tinygpt").read_bytes()
    header, state = split_file(raw)
    assert header["includesOptimizerState"] is False and len(state) == 4 + 4 * MICRO.param_count()
    model, opt = trained(MICRO)
    save(tmp_path / "o.tinygpt", model, opt)
    _, state = split_file((tmp_path / "o.tinygpt").read_bytes())
    assert len(state) == 4 + 12 * MICRO.param_count()


def test_header_keys_and_layout_follow_the_spec(tmp_path):
    model, opt = trained(MICRO)
    save(tmp_path / "a.tinygpt", model, opt, preset="micro")
    raw = (tmp_path / "a.tinygpt").read_bytes()
    magic, version, n = PREFIX.unpack(raw[:12])
    assert (magic, version) == (b"TGPT", 2)
    header, state = split_file(raw)
    assert REQUIRED <= set(header)
    assert header["config"] == {"nLayer": 1, "nHead": 2, "dModel": 8, "ctx": 4, "vocabSize": 256, "layerNormEps": 1e-5}
    assert header["manifest"] == manifest_entries(MICRO)
    assert header["manifest"][0] == {"name": "token_embedding.weight", "shape": [256, 8], "offset": 0}
    assert re.fullmatch(r"[0-9a-f]{8}", header["stateCrc32"]) and header["stateCrc32"] == f"{zlib.crc32(state):08x}"
    assert raw.count(b'"headerCrc32":"') == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", header["savedAt"])
    assert raw[12:12 + n].rstrip(b" ").endswith(b"}")  # padding is spaces after the JSON
    # state: i32 step, then weights in manifest order, Linear weights as PyTorch [out, in] row-major
    assert struct.unpack("<i", state[:4])[0] == 3
    floats = np.frombuffer(state[4:], dtype="<f4")
    P = MICRO.param_count()
    params = dict(model.named_parameters())
    for e in header["manifest"]:
        size = math.prod(e["shape"])
        for block, source in enumerate((lambda p: p, lambda p: opt.state[p]["exp_avg"],
                                        lambda p: opt.state[p]["exp_avg_sq"])):
            want = source(params[e["name"]]).detach().reshape(-1).numpy()
            got = floats[block * P + e["offset"]: block * P + e["offset"] + size]
            assert np.array_equal(bits(got), bits(want)), (block, e["name"])
    q = model.blocks[0].attn.q_proj
    off = next(e["offset"] for e in header["manifest"] if e["name"] == "blocks.0.attn.q_proj.weight")
    o, i = 3, 5  # element (o, i) at o * in + i multiplies input i into output o
    assert floats[off + o * 8 + i] == q.weight[o, i].item()
    x = torch.zeros(8)
    x[i] = 1.0
    assert (q(x) - q.bias)[o].item() == floats[off + o * 8 + i]


@pytest.mark.parametrize("sample_len", range(8))
def test_state_is_4_byte_aligned_for_every_header_length(tmp_path, sample_len):
    save(tmp_path / "a.tinygpt", TinyGPT(MICRO, seed=0), sample="x" * sample_len)
    raw = (tmp_path / "a.tinygpt").read_bytes()
    n = PREFIX.unpack(raw[:12])[2]
    assert (12 + n) % 4 == 0
    read_state(tmp_path / "a.tinygpt")


def test_unknown_header_keys_are_ignored(tmp_path):
    model = TinyGPT(MICRO, seed=2)
    weights = {n: p.detach().numpy() for n, p in model.named_parameters()}
    extra = {"futureFeature": {"nested": [1, 2, {"x": None}]}, "zzz": "\u2603"}
    write_state(tmp_path / "a.tinygpt", CheckpointState(MICRO, 0, weights, header=extra))
    state = read_state(tmp_path / "a.tinygpt")
    assert state.header["futureFeature"] == extra["futureFeature"] and state.header["zzz"] == "\u2603"
    assert all(np.array_equal(bits(weights[n]), bits(state.weights[n])) for n in weights)


def test_save_takes_the_step_from_the_optimizer_and_refuses_a_contradicting_one(tmp_path):
    model, opt = trained(MICRO, steps=2)
    save(tmp_path / "a.tinygpt", model, opt)
    assert read_state(tmp_path / "a.tinygpt").step == 2
    with pytest.raises(TinyGPTFileError, match="step 5 differs from the optimizer's step 2"):
        save(tmp_path / "b.tinygpt", model, opt, step=5)


# ---------------------------------------------------------------- what the writer refuses

def test_save_refuses_nan_and_leaves_the_existing_file_intact(tmp_path):
    model = TinyGPT(MICRO, seed=0)
    path = tmp_path / "keep.tinygpt"
    save(path, model)
    before = path.read_bytes()
    with torch.no_grad():
        model.blocks[0].mlp.fc_in.weight[1, 2] = float("nan")
    with pytest.raises(TinyGPTFileError, match="refusing to save: weights of blocks.0.mlp.fc_in.weight holds NaN"):
        save(path, model)
    with torch.no_grad():
        model.blocks[0].mlp.fc_in.weight[1, 2] = 0.0
    with pytest.raises(TinyGPTFileError, match="header metadata is not plain JSON"):
        save(path, model, finalLoss=float("nan"))
    with pytest.raises(TinyGPTFileError, match="may not hold a key named 'headerCrc32'"):
        save(path, model, training={"headerCrc32": "0123abcd"})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.tinygpt"]  # no temp file left behind


def test_writer_refuses_wrong_shapes_missing_tensors_and_bad_steps(tmp_path):
    weights = {n: p.detach().numpy() for n, p in TinyGPT(MICRO, seed=0).named_parameters()}
    bad = dict(weights, **{"ln_f.bias": np.zeros(9, np.float32)})
    with pytest.raises(TinyGPTFileError, match=r"ln_f.bias has shape \[9\], the config implies \[8\]"):
        write_state(tmp_path / "a", CheckpointState(MICRO, 0, bad))
    with pytest.raises(TinyGPTFileError, match="lack tensor ln_f.weight"):
        write_state(tmp_path / "a", CheckpointState(MICRO, 0, {k: v for k, v in weights.items() if k != "ln_f.weight"}))
    for step in (-1, 2**31, 1.5):
        with pytest.raises(TinyGPTFileError, match="step must be an integer"):
            write_state(tmp_path / "a", CheckpointState(MICRO, step, weights))
    with pytest.raises(TinyGPTFileError, match="m and v must be given together"):
        write_state(tmp_path / "a", CheckpointState(MICRO, 0, weights, m=weights))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- what the reader refuses

def refused(tmp_path, raw: bytes, problem: str):
    with pytest.raises(TinyGPTFileError, match=problem) as e:
        read_state(write(tmp_path / "bad.tinygpt", raw))
    print(f"refused: {e.value}")


def test_reader_accepts_the_valid_file(tmp_path):
    state = read_state(write(tmp_path / "ok.tinygpt", valid_file()))
    assert state.step == 3 and state.m is not None and state.header["dataState"]["batchesDrawn"] == 3


def test_refuses_missing_file(tmp_path):
    refused_path = tmp_path / "none.tinygpt"
    with pytest.raises(TinyGPTFileError, match="does not exist"):
        read_state(refused_path)
    with pytest.raises(TinyGPTFileError, match="cannot be read"):
        read_state(tmp_path)  # a directory


@pytest.mark.parametrize("cut, problem", [
    (0, "truncated: 0 bytes, shorter than the 12-byte prefix"),
    (7, "truncated: 7 bytes"),
    (40, "truncated: header of \\d+ bytes runs past the end"),
    (-1, "state length mismatch.*the file is truncated"),
    (-5000, "state length mismatch.*the file is truncated"),
])
def test_refuses_truncated_file(tmp_path, cut, problem):
    raw = valid_file()
    refused(tmp_path, raw[:cut], problem)


def test_refuses_wrong_magic_and_unknown_version(tmp_path):
    raw = valid_file()
    refused(tmp_path, b"GGUF" + raw[4:], "not a .tinygpt file: magic is b'GGUF'")
    refused(tmp_path, raw[:4] + struct.pack("<I", 3) + raw[8:], "unknown .tinygpt version 3")


def test_json_numbers_are_read_as_the_browser_reads_them():
    """One kind of number: 256.0 is 256 (JSON.parse cannot tell them apart, so neither may python_ref),
    integers past 2^53 are the floats JSON.parse makes of them, and a 5,000-digit number is inf."""
    from python_ref.header_checks import json_number
    cases = {"256.0": 256, "256": 256, "-0": 0, "1e2": 100, "0.5": 0.5, "9007199254740993": 9007199254740992,
             "12345678901234567891": 1.2345678901234567e19, "1" * 5000: float("inf")}
    for text, expected in cases.items():
        got = json_number(text)
        print(f"{text[:24]}{'…' if len(text) > 24 else ''} -> {got!r}")
        assert got == expected and type(got) is type(expected)


def test_refuses_invalid_header_json(tmp_path):
    _, state = split_file(valid_file())
    for text, problem in ((b'{"config": ', "header JSON invalid"), (b"[1, 2, 3]", "expected an object"),
                          (b'{"a": "\xff\xfe"}', "header JSON invalid: not UTF-8"),
                          (b'{"a": NaN}', "header JSON invalid: not a JSON text"),
                          (b"[" * 100_000 + b"]" * 100_000, "header JSON nests deeper than 32 levels"),
                          (b'{"a":' * 33 + b"1" + b"}" * 33, "header JSON nests deeper than 32 levels")):
        text += b" " * (-(12 + len(text)) % 4)
        refused(tmp_path, PREFIX.pack(b"TGPT", 2, len(text)) + text + state, problem)


def test_refuses_unaligned_header(tmp_path):
    raw = valid_file()
    header, state = split_file(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-(12 + len(text)) % 4) + 1)
    refused(tmp_path, PREFIX.pack(b"TGPT", 2, len(text)) + text + state, "unaligned")


def test_refuses_header_crc_mismatch_and_missing_header_crc(tmp_path):
    raw = valid_file()
    at = raw.index(b'"sample":"hi"') + len(b'"sample":"')
    refused(tmp_path, raw[:at] + b"H" + raw[at + 1:], "header CRC32 mismatch")
    header, state = split_file(raw)
    del header["headerCrc32"]
    refused(tmp_path, assemble(header, state), "lacks a valid headerCrc32")


def test_refuses_state_crc_mismatch(tmp_path):
    raw = bytearray(valid_file())
    raw[-3] ^= 0x10
    refused(tmp_path, bytes(raw), "state CRC32 mismatch")


def test_refuses_state_length_mismatch(tmp_path):
    raw = valid_file()
    refused(tmp_path, raw + b"\0\0\0\0", r"state length mismatch: \d+ bytes after the header, expected \d+")
    header, state = split_file(raw)
    refused(tmp_path, assemble(dict(header, includesOptimizerState=False), state), "state length mismatch")


@pytest.mark.parametrize("edit, problem", [
    (lambda h: h["manifest"][3].update(shape=[4, 2]),
     "manifest/shape mismatch: blocks.0.ln1.bias is listed as shape \\[4, 2\\]"),
    (lambda h: h["manifest"][0].update(offset=False), "manifest/shape mismatch: token_embedding.weight"),
    (lambda h: h["manifest"][4].update(offset=h["manifest"][4]["offset"] + 1), "manifest/shape mismatch"),
    (lambda h: h["manifest"].reverse(),
     "manifest/shape mismatch: found tensor 'ln_f.bias' where 'token_embedding.weight'"),
    (lambda h: h["manifest"].pop(), "manifest/shape mismatch: 19 tensors listed, the config implies 20"),
    (lambda h: h["config"].update(nHead=3), r"config in header invalid: dModel \(8\) is not divisible by nHead \(3\)"),
    (lambda h: h["config"].update(nLayer=4096), "state length mismatch"),
    (lambda h: h["config"].update(nLayer=10**15),
     "config in header invalid: nLayer must be an integer in \\[1, 4096\\], got 1000000000000000"),
    (lambda h: h["config"].update(dModel="8"),
     "config in header invalid: dModel must be an integer in \\[1, 65536\\], got '8'"),
    (lambda h: h.pop("config"), "header key 'config' is missing"),
    (lambda h: h.update(includesOptimizerState="yes"), "header key 'includesOptimizerState' is missing or not a bool"),
    (lambda h: h.update(stateCrc32="0" * 8), "state CRC32 mismatch"),
    (lambda h: h.update(stateCrc32="ABCDEF01"), "header key 'stateCrc32' must be 8 lowercase hex digits"),
    (lambda h: h["manifest"].__setitem__(0, "token_embedding.weight"),
     "manifest/shape mismatch: entry 0 is 'token_embedding.weight', not an object"),
    (lambda h: h["config"].update(nLayer=4096, dModel=65536),
     "the header's config is implausible \\(over 1 TiB of state\\), not the file truncated"),
    (lambda h: h.update(dataState={"seed": 1}), "header key 'dataState' must be"),
])
def test_refuses_header_edits_even_with_a_valid_header_crc(tmp_path, edit, problem):
    header, state = split_file(valid_file())
    edit(header)
    refused(tmp_path, assemble(header, state), problem)


@pytest.mark.parametrize("optimizer", [False, True])
def test_refuses_nan_in_weights_or_moments_even_with_valid_crcs(tmp_path, optimizer):
    header, state = split_file(valid_file(optimizer))
    floats = np.frombuffer(state[4:], dtype="<f4").copy()
    P = MICRO.param_count()
    at = (2 * P if optimizer else 0) + 300  # in v, or in the weights of token_embedding
    floats[at] = np.nan
    crafted = assemble(header, state[:4] + floats.tobytes(), state_crc=True)
    refused(tmp_path, crafted,
            f"non-finite value \\(NaN or infinity\\) in {'AdamW v' if optimizer else 'weights'} "
            "of token_embedding.weight")


def test_refuses_a_negative_adamw_v_even_with_valid_crcs(tmp_path):
    """v is a mean of squares: a negative one would be square-rooted by the next AdamW step."""
    header, state = split_file(valid_file(True))
    floats = np.frombuffer(state[4:], dtype="<f4").copy()
    floats[2 * MICRO.param_count() + 300] = -1e-6
    refused(tmp_path, assemble(header, state[:4] + floats.tobytes(), state_crc=True),
            "negative value in AdamW v of token_embedding.weight: v is a mean of squares")


def test_refuses_negative_step_even_with_valid_crcs(tmp_path):
    header, state = split_file(valid_file(False))
    refused(tmp_path, assemble(header, struct.pack("<i", -4) + state[4:], state_crc=True), r"step is negative \(-4\)")


def test_lengths_are_64_bit_for_a_behemoth_file(tmp_path):
    """A sparse 5.68 GB file one float short: the length arithmetic must not wrap at 2^32."""
    from python_ref.config import model_config
    config = model_config("behemoth")
    header = {"config": config.to_json(), "manifest": manifest_entries(config), "includesOptimizerState": True,
              "stateCrc32": "00000000", "headerCrc32": "00000000"}
    prefix_and_header = assemble(header, b"")
    path = tmp_path / "behemoth.tinygpt"
    with open(path, "wb") as f:
        f.write(prefix_and_header)
        f.truncate(len(prefix_and_header) + 4 + 12 * 473_244_160 - 4)
    with pytest.raises(TinyGPTFileError, match="5678929920 bytes after the header, expected 5678929924") as e:
        read_state(path)
    print(f"refused: {e.value}")


# ---------------------------------------------------------------- compact float16 files

@pytest.mark.parametrize("config", [MICRO, ODD], ids=["even P", "odd P"])
def test_float16_file_holds_numpys_float16_bits(tmp_path, config):
    weights = weights_with(config, float16_edge_values())
    path = tmp_path / "h.tinygpt"
    write_state(path, CheckpointState(config, 7, weights, header={"sample": "x"}), dtype="float16")
    raw = path.read_bytes()
    header, state = split_file(raw)
    P = config.param_count()
    assert header["weightsDtype"] == "float16" and header["includesOptimizerState"] is False
    assert len(raw) % 4 == 0 and len(state) == 4 + 2 * P + 2 * (P % 2)
    want16 = np.concatenate([weights[e["name"]].reshape(-1).astype("<f2") for e in header["manifest"]])
    assert state[4:4 + 2 * P] == want16.tobytes() and state[4 + 2 * P:] == b"\0" * (2 * (P % 2))
    back = read_state(path)
    assert back.step == 7 and back.m is None and back.header["weightsDtype"] == "float16"
    worst_vs_numpy = worst_rounding = 0.0
    for name, a in weights.items():
        want = a.astype(np.float16).astype(np.float32)
        assert back.weights[name].dtype == np.float32
        assert np.array_equal(bits(back.weights[name]), bits(want)), name  # bitwise: -0.0 stays -0.0
        worst_vs_numpy = max(worst_vs_numpy, float(np.abs(back.weights[name] - want).max()))
        worst_rounding = max(worst_rounding,
                             float((np.abs(back.weights[name] - a) / np.maximum(np.abs(a), 2.0**-14)).max()))
    print(f"P={P}: max |float16 file - numpy float16| = {worst_vs_numpy}, "
          f"max relative rounding error {worst_rounding:.2e} (float16 half-ulp: {2.0**-11:.2e})")
    assert worst_rounding <= 2.0 ** -11


def test_float16_file_loads_as_a_model_with_nearly_the_same_eval_loss(tmp_path):
    model, _ = trained(SMALLISH, steps=5)
    save(tmp_path / "f32.tinygpt", model)
    save(tmp_path / "f16.tinygpt", model, dtype="float16")
    size32, size16 = (tmp_path / "f32.tinygpt").stat().st_size, (tmp_path / "f16.tinygpt").stat().st_size
    _, val = Corpus.from_file(DEFAULT_CORPUS).split(0.1, SMALLISH.ctx)
    loss32 = val_windows_loss(load(tmp_path / "f32.tinygpt")[0], val, 64)
    loss16 = val_windows_loss(load(tmp_path / "f16.tinygpt")[0], val, 64)
    print(f"eval loss float32 {loss32:.6f}, float16 {loss16:.6f}: |diff| {abs(loss16 - loss32):.2e}; "
          f"file {size32} -> {size16} bytes")
    assert abs(loss16 - loss32) < 1e-2
    assert size16 < size32 * 0.55


def test_float16_writer_refuses_overflow_moments_and_unknown_dtypes(tmp_path):
    weights = weights_with(MICRO, np.array([65519.0, -65519.0], np.float32))
    write_state(tmp_path / "ok.tinygpt", CheckpointState(MICRO, 0, weights), dtype="float16")
    assert read_state(tmp_path / "ok.tinygpt").weights["token_embedding.weight"][0, :2].tolist() == [65504, -65504]
    for beyond in (65520.0, -65520.0, 1e38):
        bad = dict(weights, **{"blocks.0.ln2.bias": np.full(8, beyond, np.float32)})
        with pytest.raises(TinyGPTFileError, match=r"refusing to save: weights of blocks.0.ln2.bias hold a value "
                                                   r"beyond the float16 range \(largest finite 65504\)") as e:
            write_state(tmp_path / "a", CheckpointState(MICRO, 0, bad), dtype="float16")
    print(f"refused: {e.value}")
    nan = dict(weights, **{"ln_f.bias": np.full(8, np.nan, np.float32)})
    with pytest.raises(TinyGPTFileError, match="weights of ln_f.bias holds NaN or infinity"):
        write_state(tmp_path / "a", CheckpointState(MICRO, 0, nan), dtype="float16")
    model, opt = trained(MICRO)
    with pytest.raises(TinyGPTFileError, match=r"a float16 file holds weights only \(no AdamW moments\)"):
        save(tmp_path / "a", model, opt, dtype="float16")
    with pytest.raises(TinyGPTFileError, match="unknown weights dtype 'bfloat16'"):
        write_state(tmp_path / "a", CheckpointState(MICRO, 0, weights), dtype="bfloat16")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.tinygpt"]


def test_reader_refuses_bad_float16_files(tmp_path):
    header, state = split_file(float16_file())
    refused(tmp_path, assemble(dict(header, weightsDtype="bfloat16"), state),
            "header key 'weightsDtype' must be 'float32' or 'float16', got 'bfloat16'")
    refused(tmp_path, assemble(dict(header, weightsDtype=None), state), "got None")
    refused(tmp_path, float16_file()[:-2], r"state length mismatch: \d+ bytes after the header, expected \d+ "
                                          r"\(step \+ \d+ float16\) - the file is truncated")
    moments_header, moments_state = split_file(valid_file())
    refused(tmp_path, assemble(dict(moments_header, weightsDtype="float16"), moments_state),
            "a float16 file holds weights only, but its includesOptimizerState is true")
    f32_header, f32_state = split_file(valid_file(False))
    refused(tmp_path, assemble(dict(f32_header, weightsDtype="float16"), f32_state), "state length mismatch")
    refused(tmp_path, assemble(header, float16_state_with(state, 300, 0x7E00), state_crc=True),
            r"non-finite value \(NaN or infinity\) in weights of token_embedding.weight")
    refused(tmp_path, assemble(header, float16_state_with(state, MICRO.param_count() - 1, 0xFC00), state_crc=True),
            r"non-finite value \(NaN or infinity\) in weights of ln_f.bias")
    odd_header, odd_state = split_file(float16_file(ODD))
    refused(tmp_path, assemble(odd_header, odd_state[:-2] + b"\1\0", state_crc=True),
            "float16 padding after the weights is not zero")


def test_cli_export_writes_float16_weights_and_keeps_the_metadata(tmp_path, capsys):
    src = write(tmp_path / "full.tinygpt", valid_file())
    out = tmp_path / "small.tinygpt"
    assert cli.main(["export", str(src), str(out), "--fp16"]) == 0
    print(capsys.readouterr().out.strip())
    full, half = read_state(src), read_state(out)
    assert half.header["weightsDtype"] == "float16" and half.m is None and half.step == full.step
    assert all(half.header[k] == full.header[k] for k in ("dataState", "lossHistory", "sample"))
    diff = max(float(np.abs(half.weights[n] - full.weights[n]).max()) for n in full.weights)
    print(f"export --fp16: max |weight difference| {diff:.2e}; {src.stat().st_size} -> {out.stat().st_size} bytes")
    assert all(np.array_equal(bits(half.weights[n]), bits(full.weights[n].astype(np.float16).astype(np.float32)))
               for n in full.weights)
    assert cli.main(["export", str(src), str(tmp_path / "w.tinygpt")]) == 0  # float32, moments dropped
    plain = read_state(tmp_path / "w.tinygpt")
    assert plain.m is None and "weightsDtype" not in plain.header
    assert all(np.array_equal(bits(plain.weights[n]), bits(full.weights[n])) for n in full.weights)


# ---------------------------------------------------------------- fuzz

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def fuzz_dir():
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


@lru_cache(maxsize=None)
def original_state() -> CheckpointState:
    with tempfile.TemporaryDirectory() as d:
        return read_state(write(Path(d) / "o.tinygpt", valid_file()))


def same_data(a: CheckpointState, b: CheckpointState) -> bool:
    return a.step == b.step and all(
        np.array_equal(bits(x[n]), bits(y[n])) for x, y in ((a.weights, b.weights), (a.m, b.m), (a.v, b.v)) for n in x
    )


def read_or_refuse(path: Path, raw: bytes):
    """The state, or None if refused with TinyGPTFileError; any other exception fails the test."""
    try:
        return read_state(write(path, raw))
    except TinyGPTFileError:
        return None


@FUZZ
@given(cut=st.integers(0, len(valid_file()) - 1))
def test_fuzz_truncations_are_always_refused(fuzz_dir, cut):
    assert read_or_refuse(fuzz_dir / "t.tinygpt", valid_file()[:cut]) is None


def test_every_truncation_around_the_prefix_header_and_state_edges_is_refused(tmp_path):
    raw = valid_file()
    n = PREFIX.unpack(raw[:12])[2]
    # every byte at the edges, every 13th inside the header (the hypothesis fuzz covers the rest)
    edges = [*range(0, 28), *range(12 + n - 32, 12 + n + 16), *range(len(raw) - 16, len(raw))]
    cuts = edges + list(range(28, 12 + n - 32, 13))
    assert all(read_or_refuse(tmp_path / "t.tinygpt", raw[:cut]) is None for cut in cuts)


@FUZZ
@given(data=st.data())
def test_fuzz_byte_flips_anywhere_are_refused(fuzz_dir, data):
    raw = bytearray(valid_file())
    n = PREFIX.unpack(raw[:12])[2]
    region = data.draw(st.sampled_from([(0, 12), (12, 12 + n), (12 + n, len(raw)), (0, len(raw))]))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(*region).filter(lambda i: i < region[1]))] ^= data.draw(st.integers(1, 255))
    if bytes(raw) == valid_file():
        return  # two flips cancelled out
    assert read_or_refuse(fuzz_dir / "f.tinygpt", bytes(raw)) is None


def json_paths(value, prefix=()):
    """Every (key or index) path in a JSON tree."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return []
    out = []
    for k, v in items:
        out.append(prefix + (k,))
        out += json_paths(v, prefix + (k,))
    return out


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.sampled_from([0, 1, 3, 8, 16, 10**30, -1, 8.0, 1e-5])
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6,
)


def near_misses(value):
    """Values a careless reader takes for the original: 8.0 or True for 8 or 1, "8", [8], off by one."""
    options = [None, [value], str(value), {"value": value}]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        options += [float(value), value + 1, value - 1, -value, value * 2, bool(value), 2**31 + value, 2**64 + value]
    if isinstance(value, list):
        options += [value[:-1], value + value[-1:], value[::-1], [float(v) if isinstance(v, int) else v for v in value]]
    if isinstance(value, str):
        options += [value.upper(), value + " ", value[:-1], ""]
    return st.sampled_from(options)


@FUZZ
@given(data=st.data(), fix_crc=st.booleans())
def test_fuzz_header_mutations(fuzz_dir, data, fix_crc):
    header, state = split_file(valid_file())
    path = data.draw(st.sampled_from(json_paths(header)))
    parent = header
    for k in path[:-1]:
        parent = parent[k]
    action = data.draw(st.sampled_from(["delete", "replace", "near miss"]))
    if action == "delete":
        del parent[path[-1]]
    elif action == "replace":
        parent[path[-1]] = data.draw(JSON_VALUES)
    else:
        parent[path[-1]] = data.draw(near_misses(parent[path[-1]]))
    raw = assemble(header, state, header_crc=fix_crc)
    got = read_or_refuse(fuzz_dir / "h.tinygpt", raw)
    if got is None:
        return
    # Accepted: the data must be the original's, and only a re-CRC'd (deliberate) edit may pass.
    assert same_data(got, original_state())
    if not fix_crc:
        assert raw == valid_file(), f"an edit of {path} without a new headerCrc32 was accepted"
    assert got.header == json.loads(raw[12:12 + PREFIX.unpack(raw[:12])[2]])
    assert got.config == ModelConfig.from_json(got.header["config"])  # 1.0 reads as 1, as in JSON.parse
