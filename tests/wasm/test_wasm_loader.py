"""site/static/js/wasm_loader.js: the build it picks for each engine, and the reason it gives.

The decision is checked for every missing feature (pure function, in Node), then for real: Node,
headless Chromium with COOP/COEP (threads) and without (single-threaded SIMD build, message shown
in the page), and a model only the Memory64 build can hold."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT
from support.wasm_support import chromium_page, model_spec, require_build, run_node, static_server


@pytest.fixture(scope="module")
def decisions():
    out = subprocess.run(["node", str(ROOT / "tests" / "wasm" / "hosts" / "choose_build_cases.mjs")],
                         capture_output=True, text=True, check=True, timeout=60)
    d = json.loads(out.stdout)
    for name, r in d.items():
        print(f"{name:26s} -> {r.get('build', 'ERROR')}: {r.get('reason', r.get('error'))}")
    return d


@pytest.mark.parametrize("case, build, words", [
    ("everything", "relaxed", "cross-origin isolated, 2 cores, relaxed SIMD"),
    ("noRelaxedSimd", "threads", "no WebAssembly relaxed SIMD"),
    ("notIsolated", "simd", "not cross-origin isolated"),
    ("noSimd", "scalar", "no WebAssembly SIMD"),
    ("noSimdNoThreads", "scalar", "no WebAssembly SIMD"),
    ("oneCore", "simd", "only one CPU core"),
    ("bigModel", "memory64", "more than the 4 GiB"),
    ("preferScalar", "scalar", "requested"),
    ("preferThreads", "threads", "requested"),
])
def test_choice_and_reason(decisions, case, build, words):
    assert decisions[case].get("build") == build, decisions[case]
    assert words in decisions[case]["reason"]


@pytest.mark.parametrize("case, words", [
    ("bigModelNotIsolated", "not cross-origin isolated"),
    ("bigModelNoMemory64", "no WebAssembly Memory64"),
    ("tooBig", "16 GiB"),
    ("preferThreadsNotIsolated", "not cross-origin isolated"),
    ("preferRelaxedWithout", "no WebAssembly relaxed SIMD"),
])
def test_no_build_fits_says_why(decisions, case, words):
    assert "build" not in decisions[case] and words in decisions[case]["error"], decisions[case]


@pytest.mark.parametrize("relaxed_flag", [False, True])
def test_node_gets_a_threaded_build(relaxed_flag, tmp_path):
    """Node 20 validates relaxed SIMD only behind --experimental-wasm-relaxed-simd: without the flag
    the loader must detect its absence and take the plain threads build (and say so), with it the
    relaxed build."""
    require_build("threads")
    require_build("relaxed")
    spec = dict(model_spec("tiny"), loaderOnly=True, relaxedSimdFlag=relaxed_flag)
    r = run_node(spec, tmp_path)
    print(f"\nNode (relaxed-SIMD flag {relaxed_flag}): {r['build']} ({r['threads']} threads): {r['reason']}; "
          f"needs {r['needBytes']} bytes")
    assert r["features"]["simd"] and r["features"]["threads"]
    assert r["features"]["relaxedSimd"] == relaxed_flag
    expected = ("relaxed" if relaxed_flag else "threads") if r["features"]["cores"] > 1 else "simd"
    assert r["build"] == expected
    if expected == "threads":
        assert "no WebAssembly relaxed SIMD" in r["reason"]


def browser_run(isolated: bool, spec: dict) -> tuple[dict, str]:
    with static_server(isolated=isolated) as url, chromium_page(url) as page:
        r = page.evaluate("spec => window.runInWorker(spec)", spec)
        return r, page.inner_text("#build-reason")


@pytest.mark.browser
def test_browser_without_coop_coep_falls_back_to_single_threaded_simd():
    """No COOP/COEP headers: no SharedArrayBuffer, so the SIMD build, with the reason in the page;
    and the fallback build still trains."""
    require_build("simd")
    spec = model_spec("tiny")
    spec.update(initSeed=spec["training"]["seed"], corpus="/site/static/data/tinyshakespeare.txt",
                mode="steps", steps=3)
    r, shown = browser_run(False, spec)
    print(f"\nChromium without COOP/COEP: {r.get('build')}: {shown}; losses {r.get('losses')}")
    assert "error" not in r, r.get("error")
    assert r["build"] == "simd" and r["threads"] == 1
    assert "not cross-origin isolated" in shown and shown == r["reason"]
    assert len(r["losses"]) == 3 and r["losses"][-1] < r["losses"][0]


@pytest.mark.browser
def test_browser_with_coop_coep_gets_relaxed_threads():
    """Chromium has shipped relaxed SIMD since 114: isolated, it gets the relaxed (FMA) threads build."""
    require_build("relaxed")
    spec = model_spec("tiny")
    spec.update(initSeed=spec["training"]["seed"], corpus="/site/static/data/tinyshakespeare.txt",
                mode="steps", steps=3)
    r, shown = browser_run(True, spec)
    print(f"\nChromium with COOP/COEP: {r.get('build')} ({r.get('nThreads')} threads): {shown}")
    assert "error" not in r, r.get("error")
    assert r["build"] == ("relaxed" if r["features"]["cores"] > 1 else "simd")
    assert r["features"]["memory64"] and r["features"]["simd"] and r["features"]["relaxedSimd"]
    assert shown == r["reason"]


@pytest.mark.browser
def test_browser_picks_memory64_only_for_a_model_beyond_4_gib():
    """behemoth's arena (from tg_arena_bytes_for) exceeds 4 GiB: Memory64 when isolated, and a
    clear error when not (the Memory64 build needs threads). Nothing is allocated: loader only."""
    require_build("memory64")
    spec = dict(model_spec("behemoth"), loaderOnly=True)
    r, shown = browser_run(True, spec)
    print(f"\nbehemoth, isolated: {r.get('build')}: {shown}")
    assert r.get("build") == "memory64" and "more than the 4 GiB" in shown
    r, _ = browser_run(False, spec)
    print(f"behemoth, not isolated: {r.get('error', '')[:200]}")
    assert "build" not in r and "not cross-origin isolated" in r["error"]
