"""bench/webgpu/browser_bench.py (the WGSL trainer timed in headless Chromium's WebGPU; a speed only on a GPU,
run_device.sh's CHROMIUM=1): on this machine's SwiftShader, that it refuses to give a speed, and that with
--allow-software the page's worker trains a preset, with the trainer's own dispatches, and decodes
python_ref's tokens."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.swiftshader]

BENCH = ROOT / "bench/webgpu/browser_bench.py"


def run_bench(tmp_path, *args):
    out = tmp_path / "browser.json"
    proc = subprocess.run([sys.executable, str(BENCH), *args, "--out", str(out)], capture_output=True, text=True,
                          timeout=600)
    print(proc.stderr[-2000:])
    return proc, json.loads(out.read_text())


def test_a_software_adapter_gives_no_speed(tmp_path):
    proc, result = run_bench(tmp_path, "--presets", "tiny")
    assert proc.returncode == 2
    assert result["software"] is True and result["presets"] == []
    assert "no speed figure" in proc.stderr and "swiftshader" in proc.stderr
    assert result["browser"].startswith("Chromium ")


def test_the_page_worker_trains_a_preset_and_decodes_python_refs_tokens(tmp_path):
    from bench.decode import decode_bench

    proc, result = run_bench(tmp_path, "--presets", "tiny", "--steps", "2", "--warmup", "0", "--allow-software",
                             "--page-loop", "2", "--decode-presets", "tiny", "--new-tokens", "20",
                             "--decode-variants", "notAhead", "--decode-rounds", "1")
    assert proc.returncode == 0, proc.stderr
    (tiny,) = result["presets"]
    print(f"tiny in the page's worker: {tiny['dispatchesPerStep']} dispatches a step, "
          f"loss {tiny['firstLoss']:.4f} -> {tiny['lastLoss']:.4f}")
    assert tiny["preset"] == "tiny" and tiny["batch"] == 16 and tiny["ctx"] == 32
    assert tiny["dispatchesPerStep"] >= 20 and len(tiny["blockMs"]) == 1 and tiny["msPerStep"] > 0
    # a few steps from the initial weights: near ln 256 and falling
    assert math.isfinite(tiny["lastLoss"]) and 4.5 < tiny["lastLoss"] < tiny["firstLoss"] < math.log(256) + 0.2
    assert "tiny: " in proc.stderr  # the worker's line, relayed as it came
    # the page's own loop (step_stream.js), one round as the page trains and one draining every burst
    assert len(tiny["pageLoopRoundsMs"]) == len(tiny["drainedEachBurstRoundsMs"]) == 1 and tiny["pageLoopMs"] > 0
    assert result["subgroups"]["width"] >= 1
    (decoded,) = result["decode"]
    reference = decode_bench("pytorch-cpu", "tiny", new_tokens=20)
    print(f"tiny decoded in the page: {decoded['tokens_sha256']}, python_ref {reference['tokens_sha256']}")
    # same_tokens: the KV cache's, with its next batch submitted ahead and without, and recompute's
    assert decoded["preset"] == "tiny" and decoded["same_tokens"] and set(decoded["variants"]) == {"notAhead"}
    assert decoded["tokens_sha256"] == reference["tokens_sha256"]
