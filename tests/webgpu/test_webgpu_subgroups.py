"""webgpu/subgroups.js: the probe that lets the LayerNorm and attention kernels use subgroups, under Node
(npm `webgpu`: Dawn on SwiftShader, whose subgroups are 4 invocations wide), driven by
tests/webgpu/hosts/subgroups_driver.mjs. The kernels themselves, with and without subgroups, are checked against
float64 references in test_webgpu_kernels.py, and the trainer's losses in test_webgpu_trainer.py."""
import json
import subprocess

import pytest

from conftest import ROOT, swiftshader_env

DRIVER = ROOT / "tests/webgpu/hosts/subgroups_driver.mjs"


@pytest.fixture(scope="module")
def driver():
    env = swiftshader_env()
    r = subprocess.run(["node", str(DRIVER)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_probe_finds_the_devices_subgroups(driver):
    asked, not_asked = driver["probed"]["asked"], driver["probed"]["notAsked"]
    print(f"SwiftShader: smallest subgroup {asked['minSize']}; probed width {asked['found']} "
          f"(not asked for: {not_asked['found']})")
    assert asked["features"] == ["subgroups"] and asked["found"] == asked["minSize"] == 4
    assert not_asked["features"] == [] and not_asked["found"] == 1
    assert driver["widthUnprobed"] == 1, "a device nobody probed gets the kernels without subgroups"


def test_width_is_the_smallest_subgroup_at_most_32(driver):
    made = driver["made"]
    assert made["linear32"]["width"] == 32 and made["linear4"]["width"] == 4
    assert made["linear64min32"]["width"] == 32, "a pipeline may get a bigger subgroup than another: the smallest wins"
    assert made["linear64"]["width"] == 32, "no reduction is wider than 32 lanes"


@pytest.mark.parametrize("readback", ["reversed", "strided", "badShuffle", "mixedSizes", "oddSize", "one"])
def test_a_layout_the_kernels_cannot_use_turns_subgroups_off(driver, readback):
    result = driver["made"][readback]
    print(f"{readback}: {result['reason']}")
    assert result["width"] == 1 and result["reason"].startswith("subgroups")


def test_only_kernels_that_use_subgroups_enable_them(driver):
    assert driver["enableFirst"] and not driver["fallbackEnables"]
