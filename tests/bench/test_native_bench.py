"""Smoke test of the native benchmark script (bench/cpu/native.py): one tiny run of every part
finishes and prints its tables. Timings are not checked: this is a 2-core shared CI machine."""
import os
import subprocess
import sys

from conftest import BUILD, ROOT


def test_bench_native_runs_on_tiny():
    parts = "pool,matmul,shapes" + (",step" if (BUILD / "native" / "libtinygpt.so").exists() else "")
    cmd = [sys.executable, "-m", "bench.cpu.native", "--presets", "tiny", "--threads", "2",
           "--seconds", "0.05", "--part", parts]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TINYGPT_BUILD=str(BUILD))
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    print(out.stdout[-3000:], out.stderr[-2000:])
    assert out.returncode == 0
    assert "CPU:" in out.stdout and "SIMD back end" in out.stdout
    assert "us per parallel_for" in out.stdout
    assert "| tiny |" in out.stdout
    if "step" in parts:
        assert "Training step" in out.stdout
