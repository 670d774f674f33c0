"""bench/webgpu/bench.mjs (the WGSL trainer's ms/step per preset; a speed only on a GPU, run_device.sh's
machine): on SwiftShader, that --blocks times the steps in equal blocks whose mean is msPerStep and whose
median is reported beside it, and that a count of steps the blocks do not divide is refused."""
from __future__ import annotations

import json
import statistics
import subprocess

import pytest

from conftest import ROOT, swiftshader_env

pytestmark = pytest.mark.swiftshader


def run_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(ROOT / "bench/webgpu/bench.mjs"), "--presets", "tiny", "--warmup", "0",
                           "--sizes", "", "--clocks-ms", "0", *args],
                          env=swiftshader_env(), capture_output=True, text=True, timeout=600)


def test_blocks_report_their_mean_and_median(tmp_path):
    out = tmp_path / "bench.json"
    proc = run_bench("--steps", "2", "--blocks", "2", "--out", str(out))  # a step a block: SwiftShader's take seconds
    assert proc.returncode == 0, proc.stderr[-2000:]
    tiny = json.loads(out.read_text())["presets"][0]
    print(f"tiny on SwiftShader: blocks {tiny['blockMs']} ms/step, mean {tiny['msPerStep']}, "
          f"median {tiny['medianBlockMs']}")
    assert tiny["blocks"] == 2 and len(tiny["blockMs"]) == 2 and all(t > 0 for t in tiny["blockMs"])
    assert abs(tiny["msPerStep"] - statistics.mean(tiny["blockMs"])) < 1e-9
    assert tiny["medianBlockMs"] == max(tiny["blockMs"])  # the upper middle of an even count
    assert tiny["firstLoss"] > tiny["lastLoss"] > 0


def test_blocks_that_do_not_divide_the_steps_are_refused():
    proc = run_bench("--steps", "5", "--blocks", "2")
    print(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "(no stderr)")
    assert proc.returncode != 0 and "--blocks 2: a whole divisor of --steps 5" in proc.stderr
