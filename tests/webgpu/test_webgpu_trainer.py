"""webgpu/trainer.js end to end in headless Chromium (SwiftShader: correctness only, never speed).

SwiftShader runs this WGSL at seconds per tiny-preset step on 2 shared cores, so these tests use
the tiny preset's model with a smaller batch (and, for the 50-step parity, a shorter context): the
arithmetic is the same at every size, only the loop counts differ. On SwiftShader the trainer picks
each product's software tile (Trainer's matmulTiles); the parity run and the split-K run ask for the
GPU's tiles, so the plan a GPU runs is checked against python_ref end to end here too.
"""
import base64
import json
import struct
import subprocess

import numpy as np
import pytest
import torch

from python_ref.config import DEFAULT_CORPUS, ModelConfig, TrainConfig, model_config, train_config
from python_ref.data import BatchStream, Corpus
from python_ref.evaluate import val_windows_loss
from python_ref.model import TinyGPT
from python_ref.tinygpt_file import CheckpointState, manifest_entries, model_from_state, read_state, write_state
from python_ref.train import make_optimizer, train_step
from support.browser_host import BrowserHost, from_b64

from conftest import ROOT, swiftshader_env

CORPUS_URL = "/" + str(DEFAULT_CORPUS.relative_to(ROOT))
# The tiny preset's model; the parity run shortens its context (64 tokens per batch: 4 x 16).
PARITY = {"model": {"ctx": 16}, "training": {"batch": 4, "evalWindows": 8}}
# The overfit gate on the parity run's shapes and tiles, so that its pipelines are already made (SwiftShader
# compiles each for seconds); 5e-3 takes python_ref below the bar in 43 steps (3e-3 in 64)
OVERFIT = {"model": {"ctx": 16}, "training": {"batch": 4, "lr": 5e-3}}
PARITY_STEPS = 50


@pytest.fixture(scope="module")
def host():
    with BrowserHost() as h:  # closed also when the first call fails (else later Playwright tests fail)
        print("adapter:", h.call("adapterInfo"))
        yield h


def configs(overrides: dict) -> tuple[ModelConfig, TrainConfig]:
    m = model_config("tiny").to_json() | overrides.get("model", {})
    return ModelConfig(**m), train_config("tiny", **overrides.get("training", {}))


def first_batch(cfg: ModelConfig, train_cfg: TrainConfig):
    train, _ = Corpus.from_file(DEFAULT_CORPUS).split(train_cfg.valFraction, cfg.ctx)
    return BatchStream(train, cfg.ctx, train_cfg.batch, train_cfg.seed).next()


def state_from_bytes(raw: bytes, cfg: ModelConfig) -> CheckpointState:
    """The exported bytes are the .tinygpt state: i32 step | weights | m | v (manifest order)."""
    P = cfg.param_count()
    assert len(raw) == 4 + 12 * P, f"state has {len(raw)} bytes, expected {4 + 12 * P}"
    step = struct.unpack("<i", raw[:4])[0]
    flat = np.frombuffer(raw, dtype="<f4", offset=4)
    blocks = [{e["name"]: flat[b * P + e["offset"]: b * P + e["offset"] + int(np.prod(e["shape"]))].reshape(e["shape"])
               for e in manifest_entries(cfg)} for b in range(3)]
    return CheckpointState(cfg, step, *blocks)


def batch_loss(model: TinyGPT, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return model(torch.from_numpy(x), torch.from_numpy(y))[1].item()


@pytest.fixture(scope="module")
def parity_run(host):
    cfg, train_cfg = configs(PARITY)
    x, y = first_batch(cfg, train_cfg)
    job = {"preset": "tiny", "overrides": PARITY, "corpus": CORPUS_URL, "steps": PARITY_STEPS, "evaluate": True,
           "exportState": True, "matmulTiles": "gpu", "lossBatch": {"x": x.ravel().tolist(), "y": y.ravel().tolist()}}
    return cfg, train_cfg, (x, y), host.call("trainJob", job)


def reference_run(cfg: ModelConfig, train_cfg: TrainConfig, steps: int) -> tuple[TinyGPT, list[float]]:
    """python_ref's model after `steps` steps of the portable batch stream, and their losses."""
    model = TinyGPT(cfg, train_cfg.seed)
    optimizer = make_optimizer(model, train_cfg)
    train, _ = Corpus.from_file(DEFAULT_CORPUS).split(train_cfg.valFraction, cfg.ctx)
    stream = BatchStream(train, cfg.ctx, train_cfg.batch, train_cfg.seed)
    batches = (tuple(torch.from_numpy(a) for a in stream.next()) for _ in range(steps))
    return model, [train_step(model, optimizer, *batch, train_cfg.gradClip) for batch in batches]


def test_trajectory_parity_with_python_ref(parity_run):
    cfg, train_cfg, _, run = parity_run
    model, ref = reference_run(cfg, train_cfg, PARITY_STEPS)
    got = np.array(run["losses"])
    rel = np.abs(got - ref) / np.abs(ref)
    print(f"LayerNorm and attention kernels with subgroups of {run['subgroupWidth']} (webgpu/subgroups.js)")
    assert run["subgroupWidth"] > 1, "SwiftShader has subgroups: the parity run checks the kernels using them"
    print(f"{PARITY_STEPS}-step parity (tiny model, ctx {cfg.ctx}, batch {train_cfg.batch}, lr {train_cfg.lr}): losses "
          f"{ref[0]:.4f} -> {ref[-1]:.4f}; max relative difference {rel.max():.3g} "
          f"at step {int(rel.argmax()) + 1} (bar 1e-3)")
    assert len(got) == PARITY_STEPS and rel.max() < 1e-3
    _, val_split = Corpus.from_file(DEFAULT_CORPUS).split(train_cfg.valFraction, cfg.ctx)
    val = val_windows_loss(model, val_split, train_cfg.evalWindows)
    print(f"val loss after {PARITY_STEPS} steps: WebGPU {run['valLoss']:.6f}, python_ref {val:.6f}")
    assert abs(run["valLoss"] - val) / val < 1e-3


def test_export_loads_in_python_ref(parity_run, tmp_path):
    cfg, train_cfg, (x, y), run = parity_run
    state = state_from_bytes(base64.b64decode(run["state"]), cfg)
    assert state.step == PARITY_STEPS
    path = tmp_path / "webgpu.tinygpt"
    write_state(path, state)  # the file the browser would save; read back through the checked reader
    model = model_from_state(read_state(path))
    loss = batch_loss(model, x, y)
    print(f"fixed-batch loss: WebGPU {run['batchLoss']:.6f}, python_ref on the exported state {loss:.6f}, "
          f"relative difference {abs(run['batchLoss'] - loss) / loss:.3g}")
    assert abs(run["batchLoss"] - loss) / loss < 1e-5


def test_import_state_round_trip(host, parity_run):
    _, _, (x, y), run = parity_run
    again = host.call("trainJob", {"preset": "tiny", "overrides": PARITY, "state": run["state"], "exportState": True,
                                   "matmulTiles": "gpu",
                                   "lossBatch": {"x": x.ravel().tolist(), "y": y.ravel().tolist()}})
    assert again["state"] == run["state"], "importState then exportState must give the same bytes"
    print(f"re-imported state: fixed-batch loss {again['batchLoss']:.7f} vs {run['batchLoss']:.7f}")
    assert again["batchLoss"] == run["batchLoss"]


def test_import_state_refuses_wrong_length(host):
    with pytest.raises(Exception, match="state has 12 bytes"):
        host.call("trainJob", {"preset": "tiny", "state": base64.b64encode(b"\0" * 12).decode()})


def test_overfit_gate(host):
    cfg, train_cfg = configs(OVERFIT)
    x, y = first_batch(cfg, train_cfg)
    fixed = {"x": x.ravel().tolist(), "y": y.ravel().tolist()}
    run = host.call("trainJob", {"preset": "tiny", "overrides": OVERFIT, "steps": 300, "stopBelow": 0.05,
                                 "matmulTiles": "gpu", "fixedBatch": fixed})
    losses = run["losses"]
    print(f"overfit gate (tiny model, one batch of {train_cfg.batch}x{cfg.ctx}, lr {train_cfg.lr}): {losses[0]:.4f} -> "
          f"{losses[-1]:.4f} after {len(losses)} steps (bar: < 0.05 within 300)")
    assert losses[-1] < 0.05


# the tiny preset decodes through the decode chain (decode_row.js: two dispatches a block, partial rows between
# them); heads of 12 (D/4 = 3 divides no workgroup of the decode kernels) through the one-row products and
# attention.js's tiles
KV_CACHE_MODELS = {"fused": {}, "unfused": {"model": {"nHead": 3, "dModel": 36}}}
DECODE_CHAIN = {"attention_decode_qkv", "mlp_decode", "logits_decode"}


@pytest.mark.parametrize("kind", KV_CACHE_MODELS)
def test_worker_kv_cache_matches_full_forward(host, kind):
    """In a module Web Worker: KV-cache decoding gives python_ref's logits at every position; generation streams."""
    overrides = KV_CACHE_MODELS[kind]
    cfg, train_cfg = configs(overrides)
    prompt = list(b"ROMEO: what light through yonder")[: cfg.ctx]
    job = {"preset": "tiny", "overrides": overrides, "steps": 0, "decode": prompt,
           "generate": {"prompt": list(b"ROMEO:"), "maxNewTokens": 30, "temperature": 0.8, "topK": 40, "seed": 3}}
    run = host.page.evaluate(
        "async (job) => (await import('/tests/webgpu/hosts/browser_entry.js')).trainJobInWorker(job)", job)
    model = TinyGPT(cfg, train_cfg.seed)
    with torch.no_grad():
        ref = model(torch.tensor([prompt]))[0][0].numpy()
    got = np.stack([from_b64(s) for s in run["decodeLogits"]])
    err = float(np.abs(got - ref).max())
    print(f"KV-cache decode ({kind}: {run['decodeKernels']}) of {len(prompt)} tokens vs full forward: "
          f"max abs logit difference {err:.3g} (tolerance 1e-4)")
    chain = {k for k in DECODE_CHAIN if any(name.startswith(k) for name in run["decodeKernels"])}
    assert chain == (DECODE_CHAIN if kind == "fused" else set())
    assert err < 1e-4
    # 30 tokens after a 6-token prompt cross the ctx=32 window: the cache is rebuilt once on the way
    assert len(run["generated"]) == 30 and run["streamed"] == run["generated"]


def test_node_host_runs_the_same_module(parity_run):
    ("""The same trainer.js under Node's `webgpu` package (Dawn on SwiftShader's Vulkan ICD) """
     """gives the browser's losses; Node runs it without subgroups (TINYGPT_SUBGROUPS=0), so the """
     """kernels' fallback is checked against the browser's subgroup kernels end to end.""")
    env = swiftshader_env(TINYGPT_SUBGROUPS="0")
    job = {"preset": "tiny", "overrides": PARITY, "steps": 5}
    r = subprocess.run(["node", str(ROOT / "bench/webgpu/train_node.mjs")], input=json.dumps(job), env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    node = json.loads(r.stdout.strip().splitlines()[-1])
    diff = float(np.max(np.abs(np.array(node["losses"]) - parity_run[3]["losses"][:5])))
    print(f"Node host ({node['adapter']}, no subgroups): first 5 losses {node['losses']}; "
          f"max difference to the browser's (subgroups of {parity_run[3]['subgroupWidth']}) {diff:.3g}")
    assert diff < 1e-5


@pytest.fixture(scope="module")
def native():
    from support import tinygpt_native  # the C++ level's ctypes binding

    tinygpt_native.ensure_built()
    return tinygpt_native


def test_trajectory_parity_with_cpp(parity_run, native):
    cfg, train_cfg, (x, y), run = parity_run
    with native.NativeModel(cfg, train_cfg.batch) as m:
        m.init(train_cfg.seed)
        m.set_hyper_from(train_cfg)
        m.set_corpus(DEFAULT_CORPUS.read_bytes(), train_cfg.valFraction)
        ref = np.array([m.train_step() for _ in range(PARITY_STEPS)])
    rel = np.abs(np.array(run["losses"]) - ref) / ref
    print(f"{PARITY_STEPS}-step parity with the C++ level: max relative difference {rel.max():.3g} "
          f"at step {int(rel.argmax()) + 1} (bar 1e-3)")
    assert rel.max() < 1e-3


def test_export_loads_in_cpp(parity_run, native):
    cfg, train_cfg, (x, y), run = parity_run
    raw = base64.b64decode(run["state"])
    with native.NativeModel(cfg, train_cfg.batch) as m:
        m.import_state(raw)
        loss = m.forward_loss(x, y)
        again = m.export_state(True)
    print(f"fixed-batch loss: WebGPU {run['batchLoss']:.6f}, C++ on the exported state {loss:.6f}")
    assert abs(run["batchLoss"] - loss) / loss < 1e-5
    assert again == raw, "C++ re-exports the WebGPU state byte for byte"


def test_deferred_weight_gradients_keep_parity_with_python_ref(host):
    """The plan from medium up, where each Linear's weight gradient waits for the end of the backward,
    batched over the blocks (Trainer's deferWeightGrads), on the parity run's model and the GPU's tiles:
    the residual stream's gradient kept stage by stage, each block's activations in slots of one buffer."""
    cfg, train_cfg = configs(PARITY)
    steps = 20  # fewer than PARITY_STEPS: a wrong deferred gradient moves the losses within a few steps
    run = host.call("trainJob", {"preset": "tiny", "overrides": PARITY, "corpus": CORPUS_URL, "steps": steps,
                                 "matmulTiles": "gpu", "deferWeightGrads": True})
    _, ref = reference_run(cfg, train_cfg, steps)
    rel = np.abs(np.array(run["losses"]) - ref) / np.abs(ref)
    print(f"{steps}-step parity with deferred weight gradients: losses {ref[0]:.4f} -> {ref[-1]:.4f}; "
          f"max relative difference {rel.max():.3g} at step {int(rel.argmax()) + 1} (bar 1e-3)")
    assert len(rel) == steps and rel.max() < 1e-3
    # its group does not split K, so Chromium's 10 storage buffers bind it with the head's weight gradient
    assert run["headDeferred"], "the head's weight gradient in the group, cross-entropy its input gradient's prologue"


def test_deferred_group_past_the_devices_buffers_keeps_the_head_paired(host):
    """The tiny preset as it ships on medium's plan: its group splits K, and with the split-K scratch and the
    head's operands it would bind 11 storage buffers, one more than Chromium's 10: the head's two products stay
    paired at the chain's start, after cross-entropy's own dispatch; 3 steps vs python_ref."""
    cfg, train_cfg = configs({})
    run = host.call("trainJob", {"preset": "tiny", "corpus": CORPUS_URL, "steps": 3, "matmulTiles": "gpu",
                                 "deferWeightGrads": True})
    _, ref = reference_run(cfg, train_cfg, 3)
    rel = float(np.max(np.abs(np.array(run["losses"]) - ref) / np.array(ref)))
    print(f"tiny preset deferred, the head paired: 3 steps, max relative loss difference {rel:.3g} (bar 1e-3)")
    assert not run["headDeferred"] and rel < 1e-3


def test_tiny_preset_steps_with_split_k(host):
    """The tiny preset as it ships (B·T = 512), on the GPU's tiles: weight gradients take the split-K path;
    3 steps vs python_ref."""
    cfg, train_cfg = configs({})
    run = host.call("trainJob", {"preset": "tiny", "corpus": CORPUS_URL, "steps": 3, "matmulTiles": "gpu"})
    _, ref = reference_run(cfg, train_cfg, 3)
    rel = float(np.max(np.abs(np.array(run["losses"]) - ref) / np.array(ref)))
    print(f"tiny preset, 3 steps with split-K weight gradients: max relative loss difference {rel:.3g} (bar 1e-3)")
    assert rel < 1e-3
