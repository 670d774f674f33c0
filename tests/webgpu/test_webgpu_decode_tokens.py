"""webgpu/kernels/decode_tokens.js: a batch of decoded tokens (every block, the logits and the sampler) in
one dispatch of one workgroup, under Node (npm `webgpu`: Dawn on SwiftShader), driven by
tests/webgpu/hosts/decode_tokens_driver.mjs. Each generated token's logits must be the full forward's of its window,
and its tokens those of the recompute decoder and of the decode chain."""
import json
import subprocess

import pytest

from conftest import ROOT, swiftshader_env

DRIVER = ROOT / "tests/webgpu/hosts/decode_tokens_driver.mjs"


@pytest.fixture(scope="module")
def driver():
    r = subprocess.run(["node", str(DRIVER)], env=swiftshader_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


# whether each step computes its token's row of the next window (a restart copies them) or a restart
# rebuilds them: the wide shape is asked to rebuild (decodeNextWindow false), with one row a step
@pytest.mark.parametrize("shape, next_window", [("tiny", True), ("wide", False), ("uneven", True)])
def test_tokens_in_one_workgroup_match_the_full_forward(driver, shape, next_window):
    r = driver[shape]
    m = r["model"]
    print(f"{shape} (L={m['nLayer']}, H={m['nHead']}, C={m['dModel']}, ctx={m['ctx']}): {r['tokens']} tokens in one "
          f"workgroup, the next window's rows {'by each step' if r['nextWindow'] else 'rebuilt'}; logits vs the full "
          f"forward: max abs difference {r['maxDiff']:.3g} (largest logit {r['maxLogit']:.3g}); tokens as the "
          f"recompute decoder's {r['sameAsRecompute']}, as the decode chain's {r['sameAsChain']}")
    assert r["oneWorkgroup"] and not r["chainOneWorkgroup"] and r["nextWindow"] == next_window
    assert r["maxDiff"] < 2e-6 * max(1.0, r["maxLogit"])
    assert r["sameAsRecompute"] and r["sameAsChain"] and r["tokens"] == 30


def test_the_window_kept_on_the_gpu_restarts_inside_batches(driver):
    """The kernel keeps the window: a prompt that leaves a full window is uploaded and its 31 rows (the most)
    rebuilt in the kernel, with the 15 rows of the next window that the steps did not make, and 100 tokens
    restart the window inside batches; with each batch submitted ahead of the last one's read (decodeAhead)
    and without, the tokens are the recompute decoder's."""
    r = driver["window"]
    print(f"tiny, a prompt of {r['prompt']} bytes ({r['rebuilt']} rows rebuilt), {r['tokens']} tokens: logits vs "
          f"the full forward: max abs "
          f"difference {r['maxDiff']:.3g} (largest logit {r['maxLogit']:.3g}); as the recompute decoder's "
          f"{r['sameAsRecompute']}, not ahead {r['sameNotAhead']}")
    assert r["maxDiff"] < 2e-6 * max(1.0, r["maxLogit"])
    assert r["rebuilt"] == 31 and r["sameAsRecompute"] and r["sameNotAhead"] and r["tokens"] == 100


def test_the_rule_takes_tiny_once_its_kernel_has_compiled(driver):
    """By the rule the kernel compiles in the background (a software adapter takes seconds over it) and batches
    take the decode chain until then: both give the recompute decoder's tokens."""
    r = driver["rule"]
    print(f"tiny by the rule: compiled in the background {r['pending']}, then in one workgroup {r['oneWorkgroup']}; "
          f"tokens before and after as the recompute decoder's {r['same']}")
    assert r == {"pending": True, "oneWorkgroup": True, "same": True}
