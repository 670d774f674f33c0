"""bench/webgpu/parity.py: the WGSL trainer in Node against python_ref, step by step, on the adapter at hand
(here Dawn on SwiftShader; on the GPU machine the real GPU, through run_device.sh, which runs it by default)."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, swiftshader_env


def test_parity_script_compares_the_trainers(tmp_path):
    out = tmp_path / "parity.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench/webgpu/parity.py"), "--presets", "tiny", "--steps", "3",
                        "--out", str(out)], env=swiftshader_env(),
                       capture_output=True, text=True, timeout=600)
    print(r.stdout.strip())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (row,) = json.loads(out.read_text())
    assert row["preset"] == "tiny" and row["steps"] == 3 and row["passed"]
    assert row["adapter"] == "swiftshader" and row["maxRelativeDifference"] < 1e-5


def test_parity_script_with_the_head_in_the_deferred_group(tmp_path):
    """The tiny preset on medium's plan (--defer on): its deferred weight gradients' group splits K, and Node's
    SwiftShader binds its 11 storage buffers with the head's weight gradient in it, so cross-entropy is the
    head's input gradient's prologue and the embedding's backward sums the head's split-K slabs."""
    out = tmp_path / "parity.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench/webgpu/parity.py"), "--presets", "tiny", "--steps", "3",
                        "--defer", "on", "--out", str(out)], env=swiftshader_env(),
                       capture_output=True, text=True, timeout=600)
    print(r.stdout.strip())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (row,) = json.loads(out.read_text())
    assert row["headDeferred"] and row["passed"] and row["maxRelativeDifference"] < 1e-5


def test_parity_script_fails_past_the_bar(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench/webgpu/parity.py"), "--presets", "tiny", "--steps", "2",
                        "--bar", "0"], env=swiftshader_env(),
                       capture_output=True, text=True, timeout=600)
    print(r.stdout.strip())
    assert r.returncode == 1 and "FAILED" in r.stdout
