"""Training, seen, on the WebGPU engine (site/static/js/engines/webgpu_engine.js trainStep({stats}),
webgpu/training_stats.js) against python_ref/training_stats.py, under Node (npm `webgpu`: Dawn on
SwiftShader's Vulkan ICD, correctness only, never speed; tests/webgpu/hosts/training_stats_driver.mjs):
the same weights and batches give the same per-layer gradient norms, update-to-weight ratios and attention
entropies within 1e-4, for full training and for a LoRA fine-tune's adapters; a measured step is the same
step, bit for bit, as an unmeasured one. A 2-block model of width 32, context 16 and batch 4: SwiftShader
runs the tiny preset's shape at seconds a step."""
from __future__ import annotations

import base64
import json
import subprocess

import numpy as np
import pytest
import torch

from conftest import ROOT, swiftshader_env
from python_ref.config import DEFAULT_CORPUS, ModelConfig, train_config
from python_ref.data import BatchStream, Corpus
from python_ref.finetune import new_finetune
from python_ref.lora import TARGETS
from python_ref.model import TinyGPT, manifest
from python_ref.tinygpt_file import CheckpointState, write_state
from python_ref.train import make_optimizer
from python_ref.training_stats import differences, measured_steps, probe_window, summarise

DRIVER = ROOT / "tests/webgpu/hosts/training_stats_driver.mjs"
MODEL = ModelConfig(nLayer=2, nHead=2, dModel=32, ctx=16, vocabSize=256, layerNormEps=1e-5)
BATCH, STEPS, EVERY = 4, 8, 4  # measured at steps 4 and 8, each after unmeasured steps
BAR = 1e-4


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def noisy_base() -> CheckpointState:
    """Weights far from an init (sharp attention, non-zero biases), as tests/webgpu/test_webgpu_lora.py's base."""
    r = np.random.default_rng(3)
    weights = {}
    for name, shape in manifest(MODEL):
        gain = 1.0 if (".ln" in name or name.startswith("ln_f")) and name.endswith(".weight") else 0.0
        weights[name] = (gain + (0.1 if ".ln" in name or name.startswith("ln_f") else 0.3)
                         * r.standard_normal(shape)).astype(np.float32)
    return CheckpointState(MODEL, 0, weights)


def state_bytes(state: CheckpointState) -> bytes:
    return np.int32(state.step).tobytes() + b"".join(
        np.ascontiguousarray(state.weights[n], np.float32).tobytes() for n, _ in manifest(MODEL))


def reference(module, optimizer, batches, clip, probe):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return measured_steps(module, optimizer, batches, clip, probe, STEPS, EVERY)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """Both jobs in one Node process; python_ref's runs while it does."""
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    probe = probe_window(corpus.data, MODEL.ctx)
    t = train_config("tiny", batch=BATCH)
    train, _ = corpus.split(t.valFraction, MODEL.ctx)
    base_path = tmp_path_factory.mktemp("stats") / "base.tinygpt"
    base = noisy_base()
    write_state(base_path, base)
    run = new_finetune(base_path, corpus, "cpu", rank=4, alpha=8, targets=TARGETS, batch=BATCH, evalEvery=0)
    jobs = [
        {"config": {"model": MODEL.to_json(), "training": t.to_json()}, "seed": t.seed, "steps": STEPS, "every": EVERY,
         "probe": b64(probe), "unmeasured": True},
        {"config": {"model": MODEL.to_json(), "training": run.train_cfg.to_json()}, "seed": run.train_cfg.seed,
         "steps": STEPS, "every": EVERY, "probe": b64(probe), "base": b64(state_bytes(base)),
         "lora": run.lora.config.to_json()},
    ]
    jobs_path = base_path.with_name("jobs.json")
    jobs_path.write_text(json.dumps(jobs))
    with jobs_path.open() as stdin:
        node = subprocess.Popen(["node", str(DRIVER)], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=swiftshader_env(), text=True)
    try:
        model = TinyGPT(MODEL, t.seed)
        full = reference(model, make_optimizer(model, t), BatchStream(train, MODEL.ctx, BATCH, t.seed), t.gradClip,
                         probe)
        lora = reference(run.lora, run.optimizer, run.batches, run.train_cfg.gradClip, probe)
        stdout, stderr = node.communicate(timeout=1200)
    finally:
        if node.poll() is None:
            node.kill()
            node.communicate()
    assert node.returncode == 0, stderr
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["fatals"] == []
    return {"full": (full, out["results"][0]), "lora": (lora, out["results"][1])}


def compare(what, ref, got):
    worst = {}
    measured = {m["step"]: m for m in got["measured"]}
    assert sorted(measured) == sorted(ref)
    for step, (loss, summary) in ref.items():
        m = measured[step]
        entropy = np.array(m["entropy"]).reshape(MODEL.nLayer, MODEL.nHead)
        mine = summarise(m["names"], np.array(m["sums"]).reshape(-1, 3), entropy, m["T"])
        assert mine["groups"] == summary["groups"]
        assert abs(got["losses"][step - 1] - loss) / loss < 1e-4
        for key, (a, r) in differences(mine, summary).items():
            wa, wr = worst.get(key, (0.0, 0.0))
            worst[key] = (max(wa, a), max(wr, r))
    last = ref[max(ref)][1]
    print(f"\n{what}, steps {', '.join(map(str, ref))} ({got['seconds']:.0f} s on SwiftShader): "
          f"groups {last['groups']}; "
          f"gradient norms {np.round(last['gradNorm'], 4).tolist()}, update ratios "
          f"{[f'{x:.2e}' for x in last['updateRatio']]}, entropy {np.round(last['entropy'], 3).tolist()}")
    print("WebGPU against python_ref, largest difference (absolute, relative): "
          + "; ".join(f"{k} {a:.1e}, {r:.1e}" for k, (a, r) in worst.items()))
    assert worst["gradNorm"][1] < BAR and worst["updateRatio"][1] < BAR and worst["gradNormTotal"][1] < BAR
    assert worst["entropy"][0] < BAR


def test_full_training_stats_equal_python_ref(session):
    ref, got = session["full"]
    compare("2 blocks x 32, full training", ref, got)
    assert ref[STEPS][1]["groups"] == ["embeddings", "block 0", "block 1", "final LayerNorm"]


def test_a_measured_step_is_the_same_step(session):
    _, got = session["full"]
    print(f"\nmeasured every {EVERY} steps and not at all: losses equal {got['losses'] == got['unmeasuredLosses']}, "
          f"states byte for byte {got['sameState']}")
    assert got["losses"] == got["unmeasuredLosses"] and got["sameState"]


def test_lora_adapter_stats_equal_python_ref(session):
    ref, got = session["lora"]
    compare("2 blocks x 32, LoRA r=4 on every target", ref, got)
    assert ref[STEPS][1]["groups"] == ["block 0", "block 1"]
