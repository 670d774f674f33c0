"""bench/webgpu/ab_steps.mjs (two checkouts' trainers interleaved in one process; a speed only on a GPU,
run_device.sh's machine): on SwiftShader, that both sides train the same steps from the same seed with the
probed subgroup width, and that each round times a block of each instance of each side, in alternating order.
One run (--instances 2, 2 rounds of 1 step, no warm-up block) serves both tests: each of SwiftShader's steps
costs seconds, and one process compiles the trainer's pipelines once."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, swiftshader_env

pytestmark = pytest.mark.swiftshader

ROUNDS, INSTANCES = 2, 2


@pytest.fixture(scope="module")
def ab_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ab_steps") / "ab.json"
    subprocess.run(["node", str(ROOT / "bench/webgpu/ab_steps.mjs"), "--b", str(ROOT), "--presets", "tiny",
                    "--rounds", str(ROUNDS), "--steps", "1", "--instances", str(INSTANCES), "--warmup", "0",
                    "--clocks-ms", "0", "--out", str(out)],
                   env=swiftshader_env(), check=True, capture_output=True, timeout=600)
    return json.loads(out.read_text())


def test_the_same_code_on_both_sides_trains_the_same_losses(ab_run):
    result = ab_run
    tiny = result["presets"][0]
    print(f"subgroup width {result['subgroupWidth']}; tiny A {tiny['times']['A']} ms, B {tiny['times']['B']} ms, "
          f"max loss difference {tiny['maxLossDiff']}")
    # SwiftShader's subgroups are 4 wide: the other side must get that width too, not its own default of none
    assert result["subgroupWidth"] == 4
    assert tiny["preset"] == "tiny" and tiny["dispatches"]["A"] == tiny["dispatches"]["B"]
    assert tiny["maxLossDiff"] == 0
    for side in ("A", "B"):
        # each round times a block of each instance, in the order it ran
        assert len(tiny["times"][side]) == ROUNDS * INSTANCES and all(t > 0 for t in tiny["times"][side])
        assert all(start <= end for start, end in tiny["spans"][side])
    # round 0 runs instance by instance A then B (A0 B0 A1 B1), round 1 backwards, B first (B1 A1 B0 A0)
    for i in range(INSTANCES):
        assert tiny["spans"]["A"][i][1] <= tiny["spans"]["B"][i][0]
        assert tiny["spans"]["B"][INSTANCES + i][1] <= tiny["spans"]["A"][INSTANCES + i][0]


def test_several_instances_a_side_train_the_same_losses(ab_run):
    """--instances 2: two trainers a side, each timed every round (where a trainer's buffers land moves its
    speed by up to ~2.5% on a GPU, docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §27), each instance's
    fastest block reported."""
    result = ab_run
    tiny = result["presets"][0]
    print(f"instances {result['instances']}; fastest blocks {tiny['instanceFastest']}, "
          f"max loss difference {tiny['maxLossDiff']}")
    assert result["instances"] == 2 and tiny["maxLossDiff"] == 0
    for side in ("A", "B"):
        assert len(tiny["times"][side]) == 4 and len(tiny["instanceFastest"][side]) == 2
        assert min(tiny["instanceFastest"][side]) == tiny[f"fastest{side}"]
