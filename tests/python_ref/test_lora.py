"""python_ref/lora.py: step-0 identity, frozen base, merge/unmerge, adapter file round trip and refusals."""
import json
import math
import tempfile
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from python_ref.config import ConfigError, ModelConfig, model_config
from python_ref.lora import (
    LORA_STREAM_KEY, TARGETS, AdapterFileError, LoRA, LoRAConfig, adapter_manifest, base_weights_sha256,
    initial_adapter_values, load_adapter, read_adapter, restore_adapter_optimizer, save_adapter,
)
from python_ref.model import TinyGPT
from python_ref.prng import normals
from python_ref.tinygpt_file import PREFIX, TinyGPTFileError, load, save

CONFIG = model_config("tiny")


def batch(seed=0, b=4):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 256, (b, CONFIG.ctx), generator=g)
    return idx, torch.randint(0, 256, (b, CONFIG.ctx), generator=g)


def base_weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def train_adapters(lora, steps=5, lr=1e-2):
    opt = torch.optim.AdamW(lora.parameters(), lr=lr, weight_decay=0.0)
    for s in range(steps):
        idx, targets = batch(s)
        _, loss = lora(idx, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return opt


def test_config_validation_and_canonical_order():
    c = LoRAConfig(rank=2, alpha=4, targets=["fc_out", "q_proj"])
    assert c.targets == ("q_proj", "fc_out") and c.scale == 2.0
    assert LoRAConfig.from_json(c.to_json()) == c
    for bad, problem in ((dict(rank=0), "rank"), (dict(alpha=-1), "alpha"), (dict(alpha=float("nan")), "alpha"),
                         (dict(targets=["c_attn"]), "targets"), (dict(targets=[]), "targets"),
                         (dict(targets=["q_proj", "q_proj"]), "targets"), (dict(seed=-1), "seed")):
        with pytest.raises(ConfigError, match=problem):
            LoRAConfig(**dict(dict(rank=2, alpha=4.0), **bad))


def test_adapter_shapes_and_portable_init():
    lora_cfg = LoRAConfig(rank=3, alpha=6, targets=TARGETS, seed=7)
    C = CONFIG.dModel
    shapes = dict(adapter_manifest(CONFIG, lora_cfg))
    assert shapes["blocks.0.attn.q_proj.lora_A"] == (3, C) and shapes["blocks.0.attn.q_proj.lora_B"] == (C, 3)
    assert shapes["blocks.1.mlp.fc_in.lora_A"] == (3, C) and shapes["blocks.1.mlp.fc_in.lora_B"] == (4 * C, 3)
    assert shapes["blocks.1.mlp.fc_out.lora_A"] == (3, 4 * C) and shapes["blocks.1.mlp.fc_out.lora_B"] == (C, 3)
    assert len(shapes) == 2 * len(TARGETS) * CONFIG.nLayer
    values = dict(initial_adapter_values(CONFIG, lora_cfg))
    # first A takes normals 0 .. 3C-1 of stream seed ^ key; the next A continues the count
    z = normals(7 ^ LORA_STREAM_KEY, 0, 3 * C + 3 * C)
    std = 1.0 / math.sqrt(C)  # the spec's binary64 product z * (1 / sqrt(in)), then float32
    assert np.array_equal(values["blocks.0.attn.q_proj.lora_A"].ravel(), (z[:3 * C] * std).astype(np.float32))
    assert np.array_equal(values["blocks.0.attn.k_proj.lora_A"].ravel(), (z[3 * C:] * std).astype(np.float32))
    assert all(not v.any() for n, v in values.items() if n.endswith("lora_B"))


@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), TARGETS])
def test_adding_adapters_leaves_step0_output_exactly_unchanged(targets):
    model = TinyGPT(CONFIG, seed=0)
    idx, targets_ = batch()
    with torch.no_grad():
        before, loss_before = model(idx, targets_)
        lora = LoRA(model, LoRAConfig(rank=4, alpha=8, targets=targets))
        after, loss_after = lora(idx, targets_)
    diff = (after - before).abs().max().item()
    print(f"step-0 logits with {len(targets)} adapted projections: max |diff| = {diff}")
    assert torch.equal(after, before) and torch.equal(loss_after, loss_before)


def test_only_adapters_train_and_the_base_stays_bit_identical():
    model = TinyGPT(CONFIG, seed=0)
    frozen = base_weights(model)
    lora = LoRA(model, LoRAConfig(rank=4, alpha=8, targets=TARGETS))
    assert all(not p.requires_grad for p in model.parameters())
    assert {id(p) for p in lora.parameters()} == {id(t) for _, t in lora.named_adapters()}
    initial = {n: t.detach().clone() for n, t in lora.named_adapters()}
    idx, targets = batch()
    _, loss = lora(idx, targets)
    loss.backward()
    assert all(p.grad is None for p in model.parameters())
    assert all(t.grad is not None for n, t in lora.named_adapters() if n.endswith("lora_B"))
    train_adapters(lora)
    moved = min((t - initial[n]).abs().max().item() for n, t in lora.named_adapters())
    drift = max((p - frozen[n]).abs().max().item() for n, p in model.named_parameters())
    print(f"after 5 AdamW steps: smallest max change of an adapter tensor {moved:.3e}; base drift {drift}")
    assert moved > 0
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters())


def test_training_the_adapters_lowers_the_loss():
    model = TinyGPT(CONFIG, seed=0)
    lora = LoRA(model, LoRAConfig(rank=4, alpha=8, targets=TARGETS))
    idx, targets = batch(0)
    opt = torch.optim.AdamW(lora.parameters(), lr=1e-2, weight_decay=0.0)
    losses = []
    for _ in range(30):
        _, loss = lora(idx, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(f"one fixed batch, adapters only: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    assert losses[-1] < losses[0] - 0.5


def trained_lora(targets=TARGETS):
    model = TinyGPT(CONFIG, seed=0)
    lora = LoRA(model, LoRAConfig(rank=4, alpha=8, targets=targets, seed=3))
    train_adapters(lora)
    with torch.no_grad():  # make B A substantial, so that merging is a real change
        for t in lora.lora_B:
            t.add_(torch.randn(t.shape, generator=torch.Generator().manual_seed(t.numel())) * 0.05)
    return model, lora


def test_merge_gives_the_same_logits_and_unmerge_restores_the_base():
    model, lora = trained_lora()
    frozen = base_weights(model)
    idx, _ = batch(5)
    with torch.no_grad():
        unmerged, _ = lora(idx)
        lora.merge()
        changed = max((p - frozen[n]).abs().max().item() for n, p in model.named_parameters())
        merged, _ = model(idx)  # plain model call: the merged weights alone carry the adapters
        lora.unmerge()
        restored, _ = lora(idx)
    merge_diff = (merged - unmerged).abs().max().item()
    restore_diff = max((p - frozen[n]).abs().max().item() for n, p in model.named_parameters())
    logit_diff = (restored - unmerged).abs().max().item()
    print(f"merge changed weights by up to {changed:.3e}; merged vs unmerged logits max |diff| = {merge_diff:.3e}; "
          f"unmerge vs base weights max |diff| = {restore_diff:.3e}; "
          f"logits after unmerge max |diff| = {logit_diff:.3e}")
    assert changed > 1e-3
    assert merge_diff < 1e-5
    assert restore_diff < 1e-6 and logit_diff < 1e-5
    with pytest.raises(RuntimeError, match="not merged"):
        lora.unmerge()
    lora.merge()
    with pytest.raises(RuntimeError, match="already merged"):
        lora.merge()


def test_merged_model_exports_as_a_plain_tinygpt(tmp_path):
    model, lora = trained_lora()
    idx, _ = batch(6)
    with torch.no_grad():
        want, _ = lora(idx)
        lora.merge()
    save(tmp_path / "merged.tinygpt", model)
    plain, _ = load(tmp_path / "merged.tinygpt")
    with torch.no_grad():
        got, _ = plain(idx)
    diff = (got - want).abs().max().item()
    print(f"merged .tinygpt (no LoRA code) vs adapted model: max |logit diff| = {diff:.3e}")
    assert diff < 1e-5


def test_adapters_apply_on_the_kv_cache_path_too():
    _, lora = trained_lora(("q_proj", "k_proj", "v_proj"))
    idx, _ = batch(8, b=2)
    with torch.no_grad():
        full, _ = lora(idx)
        caches = [{} for _ in range(CONFIG.nLayer)]
        steps = [lora(idx[:, t:t + 1], caches=caches, pos_offset=t)[0] for t in range(CONFIG.ctx)]
    diff = (torch.cat(steps, dim=1) - full).abs().max().item()
    print(f"LoRA model, KV cache vs full forward: max |logit diff| = {diff:.3e}")
    assert diff < 1e-5


def test_adapters_follow_a_float64_model():
    model = TinyGPT(CONFIG, seed=0).double()
    lora = LoRA(model, LoRAConfig(rank=2, alpha=2))
    assert all(t.dtype == torch.float64 for _, t in lora.named_adapters())
    idx, targets = batch()
    _, loss = lora(idx, targets)
    assert loss.dtype == torch.float64


def test_attaching_twice_is_refused():
    model = TinyGPT(CONFIG, seed=0)
    LoRA(model, LoRAConfig(rank=2, alpha=2))
    with pytest.raises(RuntimeError, match="already has LoRA adapters"):
        LoRA(model, LoRAConfig(rank=2, alpha=2))


def test_adapter_file_round_trip(tmp_path):
    model, lora = trained_lora(("k_proj", "fc_in"))
    save_adapter(tmp_path / "a.tgla", lora, note="test")
    raw = (tmp_path / "a.tgla").read_bytes()
    magic, version, n = PREFIX.unpack(raw[:12])
    assert (magic, version) == (b"TGLA", 1) and (12 + n) % 4 == 0
    count = sum(math.prod(s) for _, s in adapter_manifest(CONFIG, lora.config))
    assert len(raw) == 12 + n + 4 * count
    header = json.loads(raw[12:12 + n])
    assert header["note"] == "test" and header["lora"] == lora.config.to_json()

    fresh = TinyGPT(CONFIG, seed=0)
    back = load_adapter(tmp_path / "a.tgla", fresh)
    assert back.config == lora.config
    worst = 0.0
    for (n1, t1), (n2, t2) in zip(lora.named_adapters(), back.named_adapters()):
        assert n1 == n2 and torch.equal(t1, t2), n1
        worst = max(worst, (t1 - t2).abs().max().item())
    idx, _ = batch(7)
    with torch.no_grad():
        logit_diff = (lora(idx)[0] - back(idx)[0]).abs().max().item()
    print(f"adapter round trip: max |tensor diff| = {worst}, max |logit diff| = {logit_diff}")
    assert logit_diff == 0


def refused(path, model, problem, **kw):
    with pytest.raises(AdapterFileError, match=problem) as e:
        load_adapter(path, model, **kw)
    print(f"refused: {e.value}")
    return e


def test_adapter_loading_refuses_what_does_not_fit_or_is_damaged(tmp_path):
    model, lora = trained_lora(("q_proj",))
    path = tmp_path / "a.tgla"
    save_adapter(path, lora)
    raw = path.read_bytes()
    n = PREFIX.unpack(raw[:12])[2]
    bad = tmp_path / "bad.tgla"

    def write(b):
        bad.write_bytes(b)
        return bad

    other_shape = TinyGPT(ModelConfig(nLayer=2, nHead=3, dModel=48, ctx=16), seed=0)
    refused(path, other_shape, "does not fit this model")
    refused(path, TinyGPT(CONFIG, seed=1), "trained on other base weights")
    assert load_adapter(path, TinyGPT(CONFIG, seed=1), check_base=False).config == lora.config
    refused(write(raw[:-4]), TinyGPT(CONFIG, seed=0), "data length mismatch")
    refused(write(raw[:20]), TinyGPT(CONFIG, seed=0), "truncated")
    flipped = bytearray(raw)
    flipped[-1] ^= 1
    refused(write(bytes(flipped)), TinyGPT(CONFIG, seed=0), "data CRC32 mismatch")
    flipped = bytearray(raw)
    flipped[20] ^= 1
    refused(write(bytes(flipped)), TinyGPT(CONFIG, seed=0), "adapter header")
    refused(write(b"TGPT" + raw[4:]), TinyGPT(CONFIG, seed=0), "that is a model checkpoint")
    refused(write(raw[:4] + (9).to_bytes(4, "little") + raw[8:]), TinyGPT(CONFIG, seed=0),
            "unknown adapter file version 9")
    # a NaN with a valid data CRC
    data = np.frombuffer(raw[12 + n:], dtype="<f4").copy()
    data[0] = np.nan
    header = json.loads(raw[12:12 + n])
    header["dataCrc32"] = f"{zlib.crc32(data.tobytes()):08x}"
    from python_ref.tinygpt_file import encode_header
    text = encode_header(header)
    refused(write(PREFIX.pack(b"TGLA", 1, len(text)) + text + data.tobytes()), TinyGPT(CONFIG, seed=0), "non-finite")
    # rank in the header that disagrees with the tensors, with a valid header CRC
    header = json.loads(raw[12:12 + n])
    header["lora"]["rank"] = 5
    text = encode_header(header)
    refused(write(PREFIX.pack(b"TGLA", 1, len(text)) + text + raw[12 + n:]), TinyGPT(CONFIG, seed=0),
            "data length mismatch")
    # a manifest that lists other shapes of the same total
    header = json.loads(raw[12:12 + n])
    header["manifest"][0]["shape"] = header["manifest"][0]["shape"][::-1]
    text = encode_header(header)
    refused(write(PREFIX.pack(b"TGLA", 1, len(text)) + text + raw[12 + n:]), TinyGPT(CONFIG, seed=0),
            "manifest/shape mismatch")
    # the same CRC-32 of the base but another SHA-256: refused on the stronger identity
    header = json.loads(raw[12:12 + n])
    header["baseWeightsSha256"] = "0" * 64
    text = encode_header(header)
    refused(write(PREFIX.pack(b"TGLA", 1, len(text)) + text + raw[12 + n:]), TinyGPT(CONFIG, seed=0), "SHA-256")
    assert issubclass(AdapterFileError, TinyGPTFileError)


def test_save_adapter_refuses_nan(tmp_path):
    _, lora = trained_lora(("v_proj",))
    with torch.no_grad():
        lora.lora_A[0][0, 0] = float("inf")
    with pytest.raises(AdapterFileError, match="refusing to save"):
        save_adapter(tmp_path / "a.tgla", lora)
    assert list(tmp_path.iterdir()) == []


@lru_cache(maxsize=None)
def adapter_file() -> bytes:
    _, lora = trained_lora(("q_proj", "fc_out"))
    with tempfile.TemporaryDirectory() as d:
        save_adapter(Path(d) / "a.tgla", lora)
        return (Path(d) / "a.tgla").read_bytes()


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_fuzz_damaged_adapter_files_are_refused(data):
    """Truncations and byte flips anywhere: AdapterFileError, never another exception or a silent load."""
    raw = bytearray(adapter_file())
    if data.draw(st.booleans()):
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 3))):
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    if bytes(raw) == adapter_file():
        return
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "f.tgla").write_bytes(bytes(raw))
        with pytest.raises(AdapterFileError):
            load_adapter(Path(d) / "f.tgla", fuzz_base())  # a refused load attaches nothing: reusable


@lru_cache(maxsize=None)
def fuzz_base() -> TinyGPT:
    return TinyGPT(CONFIG, seed=0)


def test_resumable_adapter_file_holds_moments_and_step(tmp_path):
    """Saved with its optimizer, the file also holds AdamW m and v and the step; restored into a fresh
    AdamW the next steps equal those of the run that never stopped, bit for bit."""
    model = TinyGPT(CONFIG, seed=0)
    lora = LoRA(model, LoRAConfig(rank=4, alpha=8, targets=("q_proj", "fc_in"), seed=1))
    opt = train_adapters(lora, steps=3)
    save_adapter(tmp_path / "r.tgla", lora, opt, note="resumable")
    raw = (tmp_path / "r.tgla").read_bytes()
    n = PREFIX.unpack(raw[:12])[2]
    count = sum(math.prod(s) for _, s in adapter_manifest(CONFIG, lora.config))
    assert len(raw) == 12 + n + 3 * 4 * count
    f = read_adapter(tmp_path / "r.tgla")
    assert f.step == 3 and f.header["includesOptimizerState"] is True
    assert f.header["baseWeightsSha256"] == base_weights_sha256(model)

    fresh = load_adapter(tmp_path / "r.tgla", TinyGPT(CONFIG, seed=0))
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2, weight_decay=0.0)
    restore_adapter_optimizer(fresh, fresh_opt, f)
    losses = {}
    for name, (l_, o_) in {"uninterrupted": (lora, opt), "resumed": (fresh, fresh_opt)}.items():
        out = []
        for s in range(3, 6):
            idx, targets = batch(s)
            _, loss = l_(idx, targets)
            o_.zero_grad()
            loss.backward()
            o_.step()
            out.append(loss.item())
        losses[name] = out
    print(f"steps 4-6, uninterrupted {losses['uninterrupted']} vs resumed {losses['resumed']}")
    assert losses["uninterrupted"] == losses["resumed"]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(lora.named_adapters(), fresh.named_adapters()))


def test_todays_adapter_files_stay_valid(tmp_path):
    """A file without the keys this version adds (no includesOptimizerState, step, baseWeightsSha256),
    as python_ref wrote them before, still loads."""
    _, lora = trained_lora(("v_proj",))
    save_adapter(tmp_path / "a.tgla", lora)
    raw = (tmp_path / "a.tgla").read_bytes()
    n = PREFIX.unpack(raw[:12])[2]
    header = json.loads(raw[12:12 + n])
    for key in ("includesOptimizerState", "baseWeightsSha256", "headerCrc32"):
        header.pop(key)
    from python_ref.tinygpt_file import encode_header
    text = encode_header(header)
    (tmp_path / "old.tgla").write_bytes(PREFIX.pack(b"TGLA", 1, len(text)) + text + raw[12 + n:])
    back = load_adapter(tmp_path / "old.tgla", TinyGPT(CONFIG, seed=0))
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(lora.named_adapters(), back.named_adapters()))
    assert read_adapter(tmp_path / "old.tgla").m is None


def test_resumable_file_refusals(tmp_path):
    model = TinyGPT(CONFIG, seed=0)
    lora = LoRA(model, LoRAConfig(rank=2, alpha=4, targets=("q_proj",)))
    opt = train_adapters(lora, steps=2)
    save_adapter(tmp_path / "r.tgla", lora, opt)
    raw = (tmp_path / "r.tgla").read_bytes()
    n = PREFIX.unpack(raw[:12])[2]
    from python_ref.tinygpt_file import encode_header

    def with_header(change, data=None):
        header = json.loads(raw[12:12 + n])
        change(header)
        body = raw[12 + n:] if data is None else data
        header["dataCrc32"] = f"{zlib.crc32(body):08x}"
        text = encode_header(header)
        (tmp_path / "bad.tgla").write_bytes(PREFIX.pack(b"TGLA", 1, len(text)) + text + body)
        return tmp_path / "bad.tgla"

    refused(with_header(lambda h: h.pop("step")), TinyGPT(CONFIG, seed=0), "no 'step'")
    refused(with_header(lambda h: h.update(step=-1)), TinyGPT(CONFIG, seed=0), "'step' must be an integer")
    refused(with_header(lambda h: h.update(includesOptimizerState="yes")), TinyGPT(CONFIG, seed=0), "not a bool")
    refused(with_header(lambda h: h.update(includesOptimizerState=False)), TinyGPT(CONFIG, seed=0),
            "data length mismatch")
    v = np.frombuffer(raw[12 + n:], "<f4").copy()
    v[-1] = -1.0
    refused(with_header(lambda h: None, v.tobytes()), TinyGPT(CONFIG, seed=0), "negative value")
    with pytest.raises(AdapterFileError, match="differs from the optimizer's step"):
        save_adapter(tmp_path / "x.tgla", lora, opt, step=5)
