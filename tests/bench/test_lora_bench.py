"""Smoke test of the LoRA cost benchmark (bench/cpu/lora.py): one tiny run finishes and prints its
table and the memory budget check, and the WebAssembly comparison (bench/wasm/lora_node.mjs) when the
relaxed build is there. Timings are not checked: this is a 2-core shared CI machine."""
import os
import subprocess
import sys

from conftest import BUILD, ROOT
from support.tinygpt_native import ensure_built


def test_bench_lora_runs_on_tiny():
    ensure_built()
    cmd = [sys.executable, "-m", "bench.cpu.lora", "--preset", "tiny", "--threads", "1,2", "--rounds", "1",
           "--steps", "1"]
    if (BUILD / "wasm" / "relaxed" / "tinygpt.wasm").exists():
        cmd += ["--wasm", "relaxed", "--wasm-dir", str(BUILD / "wasm")]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TINYGPT_BUILD=str(BUILD))
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    print(out.stdout[-3000:], out.stderr[-2000:])
    assert out.returncode == 0
    assert "| C++ native, 1 thread(s) |" in out.stdout and "| C++ native, 2 thread(s) |" in out.stdout
    assert "LoRA / full" in out.stdout and ": yes (" in out.stdout
    if "--wasm" in cmd:
        assert "| WASM relaxed, Node, 2 thread(s) |" in out.stdout
