"""site/static/js/engines/webgpu_engine.js under Node (npm `webgpu`: Dawn on SwiftShader's Vulkan ICD,
correctness only, never speed), driven by tests/webgpu/hosts/webgpu_engine_driver.mjs: python_ref's losses,
exact resume through exportState + dataState, generation cancelled by an AbortSignal, the trainer's
analytic memory figures against the buffers it really creates, refusal past an adapter's limits,
probe(), and a lost device."""
from __future__ import annotations

import json
import subprocess
from collections import Counter

import numpy as np
import pytest
import torch

from conftest import ROOT, swiftshader_env
from python_ref.train import new_run, train_step

DRIVER = ROOT / "tests/webgpu/hosts/webgpu_engine_driver.mjs"
STEPS = 4  # as tests/webgpu/hosts/webgpu_engine_driver.mjs
RESUME_AT = 2
# every part in one Node process: train, generate, buffers and lost's generation share a device, whose pipelines
# SwiftShader then compiles once; lost destroys it, so it comes last
PARTS = ["probe", "limits", "train", "generate", "buffers", "lost"]


@pytest.fixture(scope="module")
def driver():
    r = subprocess.run(["node", str(DRIVER), *PARTS], env=swiftshader_env(), capture_output=True, text=True,
                       timeout=900)
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith('{"part":')]
    return {"parts": {line["part"]: line["result"] for line in lines}, "returncode": r.returncode, "stderr": r.stderr}


def part(driver: dict, name: str) -> dict:
    """A part's result; each part prints its own as it ends, so a part that failed fails its tests alone."""
    assert name in driver["parts"], f"part {name} did not finish (exit {driver['returncode']}):\n{driver['stderr']}"
    return driver["parts"][name]


def test_the_driver_process_ends_cleanly(driver):
    assert driver["returncode"] == 0, driver["stderr"]
    assert list(driver["parts"]) == PARTS


@pytest.fixture(scope="module")
def train_run(driver):
    run = part(driver, "train")
    assert run["fatals"] == []
    return run


def test_losses_match_python_ref(train_run):
    ref_run = new_run("tiny", device="cpu", seed=1337)
    ref = np.array([train_step(ref_run.model, ref_run.optimizer, *(torch.from_numpy(a) for a in ref_run.batches.next()),
                               ref_run.train_cfg.gradClip) for _ in range(STEPS)])
    got = np.array(train_run["losses"])
    rel = np.abs(got - ref) / ref
    print(f"{train_run['description']} Tiny preset, seed 1337, {STEPS} steps {ref[0]:.4f} -> {ref[-1]:.4f}; "
          f"max relative difference to python_ref {rel.max():.3g} at step {int(rel.argmax()) + 1} (bar 1e-3)")
    assert len(got) == STEPS and rel.max() < 1e-3


def test_exact_resume_through_export_state_and_data_state(train_run):
    r = train_run
    whole, resumed = np.array(r["losses"]), np.array(r["resumedLosses"])
    diff = float(np.abs(resumed - whole[RESUME_AT:]).max())
    print(f"resumed at step {r['resumedStep']} from {r['stateBytes']} state bytes and {r['dataState']}: steps "
          f"{RESUME_AT + 1}-{STEPS} max difference to the uninterrupted engine {diff} (bar: 0, bit for bit); "
          f"final states identical: {r['sameFinalState']}")
    assert r["firstLosses"] == r["losses"][:RESUME_AT]
    assert r["dataState"] == {"seed": 1337, "batchesDrawn": RESUME_AT} and r["resumedStep"] == RESUME_AT
    assert r["resumedLosses"] == r["losses"][RESUME_AT:]
    assert r["end"] == {"step": STEPS, "dataState": {"seed": 1337, "batchesDrawn": STEPS}}
    assert r["sameFinalState"]


def test_software_adapter_is_described_as_such(train_run):
    assert train_run["description"].endswith("(software: correct, not fast).")
    assert train_run["stepsInFlight"] == 2  # seconds a step here: Stop waits for at most 2 queued steps


def test_generation_stops_within_one_token_of_abort(driver):
    g = part(driver, "generate")
    print(f"aborted after 5 tokens: made {g['made']} ({g['streamed']}); unaborted run made {g['fullMade']}")
    assert g["fullMade"] == 40 and len(g["full"]) == 40
    assert 5 <= g["made"] <= 6 and g["streamed"] == g["full"][: g["made"]]


@pytest.fixture(scope="module")
def buffers_run(driver):
    return part(driver, "buffers")


@pytest.mark.parametrize("preset", ["tiny", "small", "tiny deferred"])
def test_requirements_equal_the_buffers_created(buffers_run, preset):
    run, usage = buffers_run[preset], buffers_run["usage"]
    need, analytic = run["need"], Counter((b["label"], b["bytes"]) for b in run["buffers"])
    created = [b for b in run["created"] if not b["usage"] & usage["UNIFORM"]]
    uniforms = sum(b["size"] for b in run["created"] if b["usage"] & usage["UNIFORM"])
    # exportState reads weights, m and v through one staging buffer each, one alive at a time
    recorded = Counter((b["label"], b["size"]) for b in created if b["label"] != "state readback")
    recorded.update({next((b["label"], b["size"]) for b in created if b["label"] == "state readback"): 1})
    storage = [b["size"] for b in created if b["usage"] & usage["STORAGE"]]
    exact = sum(b["bytes"] for b in run["buffers"])
    print(f"{preset}: {len(created)} buffers created "
          f"(the state read-back {len(created) - sum(recorded.values()) + 1} times, "
          f"one alive at a time) vs {len(run['buffers'])} listed; mismatches "
          f"{dict(recorded - analytic) or 'none'} / {dict(analytic - recorded) or 'none'}; "
          f"totalBytes {need['totalBytes']} = "
          f"{exact} listed + {need['totalBytes'] - exact} uniform bound (created {uniforms}); largest buffer "
          f"{need['largestBuffer']} ({need['largestBufferLabel']}) vs {max(b['size'] for b in created)}, "
          f"largest binding "
          f"{need['largestBinding']} vs {max(storage)}")
    assert recorded == analytic
    assert uniforms <= need["totalBytes"] - exact
    assert need["largestBuffer"] == max(b["size"] for b in created)
    assert need["largestBinding"] == max(storage)
    assert run["checkLimits"] is None


def test_a_model_past_the_adapter_limits_is_refused_before_anything_is_created(driver):
    r = part(driver, "limits")
    sentence = ("the split-K partials buffer needs 2.1 MiB, "
                "more than this adapter's maxStorageBufferBindingSize of 1 MiB")
    print(f"refused: {r['refused']!r}\nrequirements: {r['need']}\n"
          f"SwiftShader limits {r['realLimits']}: {r['everyPreset']}")
    assert r["refused"] == sentence and r["requested"] == 0
    assert r["need"]["fits"] is False and r["need"]["reason"] == sentence and "test fake" in r["need"]["where"]
    assert r["tinyOnReal"]["fits"] is True and r["tinyOnReal"]["bytes"] > 0


def test_probe_says_what_webgpu_can_do_here(driver):
    p = {case: result for case, result in part(driver, "probe").items() if case != "fatals"}
    for case, result in p.items():
        print(f"{case}: {result}")
    assert p["none"] == {"ok": False, "software": False, "name": None, "subgroups": False, "f16": False,
                         "reason": "this browser has no WebGPU (navigator.gpu is missing)"}
    assert not p["noAdapter"]["ok"] and "no adapter" in p["noAdapter"]["reason"]
    assert not p["throws"]["ok"] and "adapter request failed for the test" in p["throws"]["reason"]
    assert p["fallback"]["ok"] and p["fallback"]["software"]
    assert p["hardware"]["ok"] and not p["hardware"]["software"] and p["hardware"]["name"] == "acme gpu9 Acme GPU 9"
    assert p["real"]["ok"] and p["real"]["software"] and "swiftshader" in p["real"]["name"].lower()
    # what the page's feature list says of the adapter: SwiftShader has subgroups and no shader-f16
    assert p["real"]["subgroups"] is True and p["real"]["f16"] is False


def test_a_lost_device_fails_steps_and_calls_on_fatal(driver):
    r = part(driver, "lost")
    print(f"step in flight: {r['inFlightOutcome']}\nnext step: {r['next']}\nstep on a destroyed device: "
          f"{r['trainerOutcome']}\ngenerating when the device goes after {r['tokensBeforeLoss']} tokens: "
          f"{r['generateOutcome']}\nonFatal: {r['fatals']}")
    assert r["inFlightOutcome"] != "hung" and r["trainerOutcome"].startswith("rejected: reading the loss of step 1")
    assert r["generateOutcome"].startswith("rejected: reading sampled tokens back from the GPU failed")
    assert len(r["fatals"]) == 1 and r["fatals"][0].startswith("the WebGPU device was lost (destroyed: ")
    assert r["next"] == r["fatals"][0]
