"""wasm/src kernels (layernorm, gelu, attention, embedding, cross_entropy, residual) and matmul through
its contract: finite-difference checks of every hand-written backward, and the attention forward's
KV-cache form against its full form (wasm/tests/test_kernels.cpp)."""
import subprocess

from support.tinygpt_native import NATIVE, ensure_built


def test_every_backward_matches_finite_differences():
    ensure_built()
    run = subprocess.run([NATIVE / "test_kernels"], capture_output=True, text=True, timeout=300)
    print(run.stdout + run.stderr)
    errors = [float(line.split("max_rel_err")[1].split()[0]) for line in run.stdout.splitlines()
              if "max_rel_err" in line]
    print(f"{len(errors)} gradient checks, largest max relative error {max(errors):.2e}")
    assert run.returncode == 0 and "PASS" in run.stdout
