"""bench/decode.py: each engine's KV-cache decode and full recompute give the same tokens
(tiny preset, past a window restart), with positive rates; the WGSL recompute decoder
(webgpu/recompute_decoder.js) matches Decoder.generate on SwiftShader, which the bench refuses to
time. Tests time nothing: the rates printed here are a shared machine's, one thread, tiny model."""
import json

import pytest
import torch

from bench import decode as db
from python_ref.config import model_config

from conftest import SWIFTSHADER_ICD

NEW = 48  # tiny's ctx is 32: the window restarts once
# a software adapter's decoders are run for their tokens, never timed: one round of each (the bench's ROUNDS
# take at least 3, for a median), after the bench's warm-up generation with the same decoder
ONE_ROUND = {"min": 1, "max": 1}


@pytest.fixture
def swiftshader(monkeypatch):
    """Node + Dawn on SwiftShader's Vulkan ICD (webgpu/webgpu.mk), probed afresh."""
    monkeypatch.setenv("VK_ICD_FILENAMES", SWIFTSHADER_ICD)
    db.wgsl_adapter.cache_clear()
    yield
    db.wgsl_adapter.cache_clear()


def cpu_engines() -> list[str]:
    return ["pytorch-cpu", "native", "wasm-node"] + (["pytorch-cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("engine", cpu_engines())
def test_kv_cache_and_recompute_give_the_same_tokens(engine):
    assert db.unavailable_reason(engine) is None, "`make build` provides every CPU engine"
    r = db.decode_bench(engine, "tiny", new_tokens=NEW, threads=1)
    print(f"{engine} ({r['where']}): {NEW} tokens, KV {r['kv_tokens_per_s']:,.0f} tokens/s, recompute "
          f"{r['recompute_tokens_per_s']:,.0f} tokens/s ({r['speedup']:.1f}x); tokens {r['tokens_sha256']}")
    assert r["same_tokens"]
    assert r["kv_tokens_per_s"] > 0 and r["recompute_tokens_per_s"] > 0
    assert r["engine"] == engine and r["new_tokens"] == NEW and r["ctx"] == model_config("tiny").ctx


@pytest.mark.slow
@pytest.mark.swiftshader
def test_wgsl_recompute_decoder_matches_kv_decode_on_swiftshader(swiftshader):
    """~15 s: SwiftShader runs 40 tokens each way (plus warm-up) of the tiny model, the KV cache with its next
    batch submitted ahead and without, and all on the decode chain (time_decode.js's variants)."""
    r = db.decode_bench("wgsl-node", "tiny", new_tokens=40, allow_software_gpu=True, variants=("notAhead", "chain"),
                        rounds=ONE_ROUND)
    print(f"wgsl-node on {r['where']}: 40 tokens, KV (ahead, not) and recompute alike: {r['same_tokens']}; "
          f"tokens {r['tokens_sha256']} (no speed figure: software adapter)")
    assert r["same_tokens"] and "(software)" in r["where"] and set(r["variants"]) == {"notAhead", "chain"}


@pytest.mark.swiftshader
def test_software_adapter_gives_no_speed_figure(swiftshader):
    reason = db.unavailable_reason("wgsl-node")
    print("wgsl-node:", reason)
    assert "software" in reason and "wgsl-node" not in db.available_decode_engines()
    with pytest.raises(RuntimeError, match="wgsl-node is not available: Node's WebGPU adapter is software"):
        db.decode_bench("wgsl-node", "tiny", new_tokens=4)


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.swiftshader
def test_the_page_decodes_python_refs_tokens_on_swiftshader():
    """wgsl-chromium: both decoders in the page's worker of headless Chromium (~30 s on SwiftShader), which
    the bench refuses to time; 40 tokens cross tiny's window restart, and the KV cache's are python_ref's."""
    reason = db.unavailable_reason("wgsl-chromium")
    print("wgsl-chromium:", reason)
    assert "software adapter" in reason and "no speed figure" in reason
    with pytest.raises(RuntimeError, match="wgsl-chromium is not available: software adapter"):
        db.decode_bench("wgsl-chromium", "tiny", new_tokens=4)
    r = db.decode_bench("wgsl-chromium", "tiny", new_tokens=40, allow_software_gpu=True, variants=("notAhead",),
                        rounds=ONE_ROUND)
    reference = db.decode_bench("pytorch-cpu", "tiny", new_tokens=40)
    print(f"wgsl-chromium on {r['where']}: tokens {r['tokens_sha256']}, python_ref {reference['tokens_sha256']}")
    assert r["same_tokens"] and "(software)" in r["where"] and r["where"].startswith("Chromium ")
    assert r["tokens_sha256"] == reference["tokens_sha256"] and set(r["variants"]) == {"notAhead"}


def test_unknown_or_missing_engine_is_refused_with_the_reason():
    with pytest.raises(RuntimeError, match="unknown engine 'tpu'"):
        db.decode_bench("tpu", "tiny")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="pytorch-cuda is not available: torch .* sees no CUDA GPU"):
            db.decode_bench("pytorch-cuda", "tiny")


def test_command_line_prints_a_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "decode.json"
    assert db.main(["--engines", "native", "--presets", "tiny", "--new-tokens", "40", "--threads", "1",
                    "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| native | tiny | 32 |" in table and "| yes |" in table
    results = json.loads(out.read_text())["results"]
    assert [(r["engine"], r["preset"], r["same_tokens"]) for r in results] == [("native", "tiny", True)]
