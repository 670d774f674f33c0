"""The runs view's and the training view's logic under Node (no browser): training_stats.js groups and summarises a
measured step exactly as python_ref/training_stats.py does (the reference of every engine's figures), and
runs_compare.js reads a run from a checkpoint's header (a model's or a fine-tune's adapter file) and says what
differs between runs."""
from __future__ import annotations

import json
import subprocess

import numpy as np

from conftest import ROOT
from python_ref.config import model_config
from python_ref.model import manifest
from python_ref.training_stats import differences, max_entropy, summarise

JS = ROOT / "site/static/js"


def node(script: str):
    r = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def module(name: str) -> str:
    return json.dumps((JS / name).as_uri())


def test_summaries_equal_python_refs():
    config = model_config("small")
    rng = np.random.default_rng(1)
    names = [n for n, _ in manifest(config)]
    adapters = [f"blocks.{i}.attn.{t}.lora_{m}" for i in range(config.nLayer) for t in ("q_proj", "v_proj")
                for m in "AB"]
    cases = []
    for tensor_names in (names, adapters):
        sums = rng.random((len(tensor_names), 3)) * np.array([1.0, 50.0, 1e-4])
        sums[-1, 1] = 0.0 if tensor_names is adapters else sums[-1, 1]
        entropy = rng.random((config.nLayer, config.nHead)) * 3
        cases.append((tensor_names, sums, entropy))
    got = node(f"""
import {{ summarise, maxEntropy, groupOf, measuredNext }} from {module("training_stats.js")};
const cases = {json.dumps([[n, s.ravel().tolist(), e.ravel().tolist()] for n, s, e in cases])};
console.log(JSON.stringify({{
  summaries: cases.map(([names, sums, entropy]) => summarise(names, Float64Array.from(sums),
    {{ entropy: Float64Array.from(entropy), nHead: {config.nHead}, T: {config.ctx} }})),
  max: [1, 2, 64].map(maxEntropy), due: [0, 9, 10, 19].map((s) => measuredNext(s, 10)), off: measuredNext(9, 0),
  refused: (() => {{ try {{ groupOf("lm_head.weight"); return null; }} catch (e) {{ return e.message; }} }})(),
}}));""")
    worst = 0.0
    for (tensor_names, sums, entropy), js in zip(cases, got["summaries"]):
        ref = summarise(tensor_names, sums, entropy, config.ctx)
        assert js["groups"] == ref["groups"]
        for _, (a, _) in differences({k: v for k, v in js.items() if k != "updateRatio"},
                                     {k: v for k, v in ref.items() if k != "updateRatio"}).items():
            worst = max(worst, a)
        assert [x is None for x in js["updateRatio"]] == [x is None for x in ref["updateRatio"]]
        worst = max(worst, max(abs(a - b) for a, b in zip(js["updateRatio"], ref["updateRatio"]) if b is not None))
    print(f"groups {got['summaries'][0]['groups']} and {got['summaries'][1]['groups']}; largest difference from "
          f"python_ref {worst:.1e}; uniform entropy over 1, 2, 64 bytes {got['max']}")
    assert worst < 1e-12
    assert got["summaries"][0]["groups"] == ["embeddings", "block 0", "block 1", "block 2", "final LayerNorm"]
    assert got["summaries"][1]["groups"] == ["block 0", "block 1", "block 2"]
    assert np.allclose(got["max"], [max_entropy(1), max_entropy(2), max_entropy(64)], rtol=0, atol=1e-15)
    assert got["due"] == [False, True, False, True] and got["off"] is False
    assert got["refused"] == "tensor lm_head.weight belongs to no group of the training view"


def test_runs_read_from_headers_and_what_differs():
    corpus = {"name": "tinyshakespeare.txt", "bytes": 1115394, "sha256": "a" * 64}
    training = {"lr": 3e-4, "batch": 16, "steps": 300, "seed": 1, "weightDecay": 0.1, "gradClip": 1.0, "beta1": 0.9,
                "beta2": 0.95, "eps": 1e-8, "valFraction": 0.1, "evalEvery": 100, "evalWindows": 64}
    model = {"id": "a1", "file": "a1-0000000300.tinygpt", "header": {
        "name": "tiny, seed 1", "preset": "tiny", "config": {"nLayer": 2, "nHead": 3, "dModel": 48, "ctx": 32},
        "training": training, "corpora": [{**corpus, "fromStep": 0, "toStep": 300}],
        "lossHistory": [[1, 5.6], [300, 2.9]], "valHistory": [[100, 3.4], [300, 2.95]], "run": {"backend": "wasm"}}}
    other = {"id": "b2", "file": "b2-0000000300.tinygpt", "header": {
        **model["header"], "name": "tiny, seed 2", "training": {**training, "lr": 1e-3, "seed": 2},
        "run": {"backend": "webgpu"}, "finalLoss": 2.5, "bestVal": 2.6}}
    finetune = {"id": "c3", "file": "c3-0000000050.tgla", "header": {
        "name": "fox", "preset": "tiny", "baseConfig": {"nLayer": 2, "nHead": 3, "dModel": 48, "ctx": 32},
        "lora": {"rank": 8, "alpha": 16, "targets": ["q_proj", "v_proj"], "seed": 1},
        "base": {"name": "tiny, seed 1", "step": 300, "preset": "tiny"}, "baseWeightsSha256": "b" * 64,
        "baseCorpora": [{**corpus, "fromStep": 0, "toStep": 300}], "training": {**training, "lr": 1e-3, "steps": 50},
        "corpora": [{"name": "fox.txt", "bytes": 2000, "sha256": "c" * 64, "fromStep": 0, "toStep": 50}],
        "lossHistory": [[1, 3.0], [50, 2.0]], "valHistory": [[50, 2.1]], "run": {"backend": "wasm"}}}
    got = node(f"""
import {{ runOf, runDifferences, kindWords }} from {module("runs_compare.js")};
const runs = {json.dumps([model, other, finetune])}.map(runOf);
console.log(JSON.stringify({{ runs, two: runDifferences(runs.slice(0, 2)), three: runDifferences(runs),
  kinds: runs.map(kindWords) }}));""")
    runs, two, three = got["runs"], got["two"], got["three"]
    print("two models differ in:", [(d["label"], d["values"]) for d in two["differ"]])
    print("with a fine-tune:", [(d["label"], d["values"]) for d in three["differ"]])
    assert [r["step"] for r in runs] == [300, 300, 50] and [r["kind"] for r in runs] == ["model", "model", "lora"]
    assert runs[0]["finalLoss"] == 2.9 and runs[0]["bestVal"] == 2.95 and runs[1]["finalLoss"] == 2.5
    assert runs[2]["shape"] == {"nLayer": 2, "nHead": 3, "dModel": 48, "ctx": 32}
    assert [d["label"] for d in two["differ"]] == ["Learning rate", "Seed", "Engine"]
    assert {s["label"] for s in two["same"]} >= {"Preset", "Shape", "Steps", "Batch", "Corpus", "What it is"}
    assert "LoRA rank, alpha" not in {s["label"] for s in two["same"]}  # says nothing of plain models: left out
    labels = [d["label"] for d in three["differ"]]
    assert labels[:2] == ["What it is", "Base model"] and "LoRA rank, alpha" in labels and "Corpus" in labels
    assert got["kinds"][2] == "a fine-tune (LoRA) of tiny, seed 1 at step 300"
    base_row = next(d for d in three["differ"] if d["label"] == "Base model")
    assert base_row["values"] == ["—", "—", "tiny, seed 1 (step 300)"]
    assert [r["values"] for r in three["results"]] == [["2.9000", "2.5000", "2.0000"], ["2.9500", "2.6000", "2.1000"]]
