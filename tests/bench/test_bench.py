"""Bench: the FLOP formula, and the CLI's JSON line."""
import json
import os
import subprocess
import sys

from bench.torch_step import flops_per_token
from python_ref.config import model_config

from conftest import ROOT


def test_flops_per_token_formula():
    c = model_config("small")  # L 3, C 96, ctx 64
    n = 256 * 96 + 64 * 96 + 2 * 96 + 3 * (12 * 96 * 96 + 13 * 96)
    assert flops_per_token(c) == 6 * n + 12 * 3 * 96 * 64


def test_bench_cli_prints_a_json_line():
    # --threads 1: on the 2 shared cores of CI, two spinning torch threads make a step ~10x slower.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "python_ref.cli", "bench", "--preset", "small", "--steps", "3", "--warmup", "1",
         "--threads", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    assert r["preset"] == "small" and r["device"] == "cpu" and r["steps"] == 3 and r["warmup"] == 1
    assert r["threads"] == 1 and r["torch"]
    assert r["ms_per_step"] > 0 and r["tokens_per_s"] > 0 and r["gflops"] > 0
    tokens = 16 * 64
    assert abs(r["tokens_per_s"] - tokens / (r["ms_per_step"] / 1e3)) / r["tokens_per_s"] < 1e-3
