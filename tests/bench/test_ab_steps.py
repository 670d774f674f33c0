"""bench/webgpu/ab_steps.mjs (two checkouts' trainers interleaved in one process; a speed only on a GPU,
run_device.sh's machine): on SwiftShader, that both sides train the same steps from the same seed with the
probed subgroup width, and that each round times a block of each."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, swiftshader_env

pytestmark = pytest.mark.swiftshader


def test_the_same_code_on_both_sides_trains_the_same_losses(tmp_path):
    out = tmp_path / "ab.json"
    subprocess.run(["node", str(ROOT / "bench/webgpu/ab_steps.mjs"), "--b", str(ROOT), "--presets", "tiny",
                    "--rounds", "2", "--steps", "1", "--clocks-ms", "0", "--out", str(out)],
                   env=swiftshader_env(), check=True, capture_output=True, timeout=600)
    result = json.loads(out.read_text())
    tiny = result["presets"][0]
    print(f"subgroup width {result['subgroupWidth']}; tiny A {tiny['times']['A']} ms, B {tiny['times']['B']} ms, "
          f"max loss difference {tiny['maxLossDiff']}")
    # SwiftShader's subgroups are 4 wide: the other side must get that width too, not its own default of none
    assert result["subgroupWidth"] == 4
    assert tiny["preset"] == "tiny" and tiny["dispatches"]["A"] == tiny["dispatches"]["B"]
    assert tiny["maxLossDiff"] == 0
    for side in ("A", "B"):
        assert len(tiny["times"][side]) == 2 and all(t > 0 for t in tiny["times"][side])
        assert all(start <= end for start, end in tiny["spans"][side])
    # round 0 runs A first, round 1 B first
    assert tiny["spans"]["A"][0][1] <= tiny["spans"]["B"][0][0]
    assert tiny["spans"]["B"][1][1] <= tiny["spans"]["A"][1][0]


def test_several_instances_a_side_train_the_same_losses(tmp_path):
    """--instances 2: two trainers a side, each timed every round (where a trainer's buffers land moves its
    speed by up to ~2.5% on a GPU, docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §27), each instance's
    fastest block reported."""
    out = tmp_path / "ab.json"
    subprocess.run(["node", str(ROOT / "bench/webgpu/ab_steps.mjs"), "--b", str(ROOT), "--presets", "tiny",
                    "--rounds", "2", "--steps", "1", "--instances", "2", "--clocks-ms", "0", "--out", str(out)],
                   env=swiftshader_env(), check=True, capture_output=True, timeout=600)
    result = json.loads(out.read_text())
    tiny = result["presets"][0]
    print(f"instances {result['instances']}; fastest blocks {tiny['instanceFastest']}, "
          f"max loss difference {tiny['maxLossDiff']}")
    assert result["instances"] == 2 and tiny["maxLossDiff"] == 0
    for side in ("A", "B"):
        assert len(tiny["times"][side]) == 4 and len(tiny["instanceFastest"][side]) == 2
        assert min(tiny["instanceFastest"][side]) == tiny[f"fastest{side}"]
