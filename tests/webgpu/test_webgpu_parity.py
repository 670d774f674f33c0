"""bench/webgpu/parity.py: the WGSL trainer in Node against python_ref, step by step, on the adapter at hand
(here Dawn on SwiftShader; on the GPU machine the real GPU, through run_device.sh, which runs it by default)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, swiftshader_env


def parity(out, *args):
    """parity.py on the tiny preset for 3 steps, its rows written to `out`."""
    return subprocess.run([sys.executable, str(ROOT / "bench/webgpu/parity.py"), "--presets", "tiny", "--steps", "3",
                           "--out", str(out), *args], env=swiftshader_env(), capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def past_a_bar_of_zero(tmp_path_factory):
    """The trainer's own rule (the head's gradient not deferred at tiny), against a bar of 0: one run serves the
    parity of that path (its --out row keeps the largest difference) and the script's failure past its bar."""
    out = tmp_path_factory.mktemp("parity") / "parity.json"
    r = parity(out, "--bar", "0")
    return r, json.loads(out.read_text()) if out.exists() else None


def test_parity_script_compares_the_trainers(past_a_bar_of_zero):
    r, rows = past_a_bar_of_zero
    print(r.stdout.strip())
    assert rows is not None, r.stdout[-2000:] + r.stderr[-2000:]
    (row,) = rows
    assert row["preset"] == "tiny" and row["steps"] == 3 and not row["headDeferred"]
    assert row["adapter"] == "swiftshader" and row["maxRelativeDifference"] < 1e-5


def test_parity_script_with_the_head_in_the_deferred_group(tmp_path):
    """The tiny preset on medium's plan (--defer on): its deferred weight gradients' group splits K, and Node's
    SwiftShader binds its 11 storage buffers with the head's weight gradient in it, so cross-entropy is the
    head's input gradient's prologue and the embedding's backward sums the head's split-K slabs. At the default
    bar the script passes (exit 0)."""
    out = tmp_path / "parity.json"
    r = parity(out, "--defer", "on")
    print(r.stdout.strip())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (row,) = json.loads(out.read_text())
    assert row["headDeferred"] and row["passed"] and row["maxRelativeDifference"] < 1e-5


def test_parity_script_fails_past_the_bar(past_a_bar_of_zero):
    r, rows = past_a_bar_of_zero
    print(r.stdout.strip())
    assert r.returncode == 1 and "FAILED" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert rows is not None and not rows[0]["passed"], "the failing row is written all the same"
