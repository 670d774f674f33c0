"""webgpu/kernels/sample_decode.js and Decoder.generate's batches sampled on the GPU, under Node (npm `webgpu`:
Dawn on SwiftShader), driven by tests/webgpu/hosts/sample_decode_driver.mjs. The kernel computes the float64 sampling
rule in f32 with a bound on its error and calls a token certain only beyond that bound: every certain token
must be prng.js's sampleToken's (itself python_ref's pick_token's, test_webgpu_prng.py), whatever the rows."""
import json
import subprocess

import pytest

from conftest import ROOT, swiftshader_env

DRIVER = ROOT / "tests/webgpu/hosts/sample_decode_driver.mjs"


@pytest.fixture(scope="module")
def driver():
    r = subprocess.run(["node", str(DRIVER)], env=swiftshader_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_certain_tokens_are_the_host_rules(driver):
    for setting, t in driver["rows"].items():
        print(f"temperature/top-k {setting}: {t['certain']} of {t['rows']} random rows certain, "
              f"{len(t['wrong'])} of them differing from sampleToken")
        assert t["wrong"] == []
        assert t["certain"] >= 0.97 * t["rows"], "the bound should leave few tokens to the host"


def test_thresholds_at_an_edge_are_never_certain_and_wrong(driver):
    e = driver["edges"]
    print(f"thresholds within 1e-9..1e-4 of a cumulative edge: {e['certain']} of {e['rows']} certain, "
          f"{len(e['wrong'])} wrong")
    assert e["wrong"] == [] and 0 < e["certain"] < e["rows"]


def test_non_finite_or_huge_logits_go_to_the_host(driver):
    u = driver["unusable"]
    print(f"rows with NaN, ±inf or 2^62: {u['certain']} of {u['rows']} certain")
    assert u["rows"] > 0 and u["certain"] == 0


def test_generate_gives_the_recompute_decoders_tokens(driver):
    """The KV cache with GPU sampling against the host's sampling of every token (RecomputeDecoder): with
    the decode chain and a sampler dispatch a step, its next batch submitted ahead and not, and with each
    batch in one workgroup (decode_tokens.js)."""
    runs = driver["generate"]
    for g in runs:
        path = "one workgroup" if g["oneWorkgroup"] else "decode chain" + ("" if g["decodeAhead"] else ", not ahead")
        print(f"{path}: T={g['temperature']} top-k {g['topK']}, "
              f"{g['maxNewTokens']} tokens after {g['prompt']!r}"
              f"{'' if g['refused'] is None else ', one step of each batch refused'}: same {g['same']}; "
              f"{g['batches']} batches ({g['prefills']} opened by a "
              f"{'window upload' if g['oneWorkgroup'] else 'prefill'}) of {g['steps']} steps, "
              f"{g['uncertain']} cut short, {g['hostDecodes']} decodes sampled on the host (batches of "
              f"{g['batchMs']} ms); chain batches submitted ahead {g['ahead']}, waited out {g['landed']}")
        assert g["same"] and g["streamed"] and g["count"] == g["maxNewTokens"]
    assert [g["oneWorkgroup"] for g in runs] == [False] * 16 + [True] * 8
    assert [g["decodeAhead"] for g in runs[:16]] == [True] * 8 + [False] * 8
    for chain, ahead, path in ((True, True, runs[:8]), (True, False, runs[8:16]), (False, True, runs[16:])):
        plain, refused, greedy, full, cold, one, newline, hurried = path
        assert plain["hostDecodes"] == 0 and plain["uncertain"] == 0
        if chain:
            # tiny's ctx of 32: the window restarts every 16 tokens, and each restart's prefill opens a batch
            assert plain["prefills"] >= 4
        else:
            # the kernel restarts the window itself: only the prompt is uploaded, and batches of 1, 2, 4, 8, 16,
            # 32 and 7 steps make the 70 tokens
            assert plain["prefills"] == 1 and plain["batches"] == 7
            assert refused["prefills"] == refused["uncertain"] + 1, "each host-sampled token uploads the window"
        if chain and ahead:
            # every batch after the first went on from the GPU's token and window, restarts included
            assert plain["ahead"] == plain["batches"] - 1 and plain["landed"] == 0
            assert refused["landed"] > 0, "a batch submitted ahead of a host-sampled token is waited out"
        if chain and not ahead:
            assert all(g["ahead"] == 0 for g in path)
        assert refused["uncertain"] > 0, "the host's path for an uncertain step is exercised"
        assert greedy["uncertain"] == greedy["batches"], "and for an uncertain first step after a prefill"
        assert full["batches"] > 0 and one["batches"] == one["prefills"] == 1
        assert cold["batches"] == 0 and cold["hostDecodes"] > 0, "outside the kernel's temperatures the host samples"
        assert newline["batches"] > newline["prefills"], "a one-byte prompt opens with a batch of its own"
        # no time for more than a step a batch, but in the second, sized before the first's time was known
        assert hurried["steps"] == hurried["count"] and hurried["batches"] == hurried["count"] - 1


def test_training_goes_on_after_generating(driver):
    print(f"a step after {len(driver['generate'])} generations: loss {driver['lossAfter']:.4f}")
    assert 5.0 < driver["lossAfter"] < 6.0, "the seeded tiny model's first loss is about ln(256) = 5.55"
