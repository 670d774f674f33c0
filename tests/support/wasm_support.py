"""Shared by the WebAssembly tests: bench/hosts.py's runners (the builds, Node, a static server, headless
Chromium) wrapped so that a failure fails the test, and the comparisons the parity tests make.
"""
from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest

from bench.hosts import (CHROMIUM_ARGS, CORPUS, NATIVE_LIB, WASM_DIR, headless_chromium, model_spec,  # noqa: F401
                         node_scenario, static_server)


def require_build(build: str) -> Path:
    path = WASM_DIR / build / "tinygpt.mjs"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make build` (scripts/build_wasm.sh) first")
    return path


def run_node(spec: dict, tmp_path: Path, timeout: float = 600) -> dict:
    """Runs one scenario in Node; returns its JSON result (fails the test with Node's error)."""
    result = node_scenario(spec, tmp_path, timeout)
    if "error" in result:
        pytest.fail(f"node scenario failed ({spec.get('build')}): {result['error']}")
    return result


@contextlib.contextmanager
def chromium_page(base_url: str):
    """headless_chromium for a test: skipped without playwright, failed without chromium."""
    pytest.importorskip("playwright.sync_api", reason="playwright not installed (make setup)")
    if not shutil.which("chromium"):
        pytest.fail("chromium is not installed (make setup installs the Debian package)")
    with headless_chromium(base_url) as page:
        yield page


def run_browser(page, spec: dict, timeout_ms: int = 600_000) -> dict:
    """Runs one scenario (or loader check) in the page's module worker; returns its result."""
    page.set_default_timeout(timeout_ms)
    result = page.evaluate("spec => window.runInWorker(spec)", spec)
    if "error" in result:
        pytest.fail(f"browser scenario failed: {result['error']}\nconsole: {page.console_log[-20:]}")
    return result


def max_rel_diff(a, b) -> float:
    return max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b, strict=True))


def python_init_file(path: Path, preset: str, seed: int) -> bytes:
    """A .tinygpt written by python_ref (portable init of `seed`, step 0, no moments); returns its
    state bytes (what tg_import_state takes)."""
    from python_ref.config import model_config
    from python_ref.model import TinyGPT
    from python_ref.tinygpt_file import save
    save(path, TinyGPT(model_config(preset), seed=seed), preset=preset)
    raw = path.read_bytes()
    return raw[12 + int.from_bytes(raw[8:12], "little"):]


def native_trajectory(preset: str, init_state: bytes, steps: int, threads: int = 1) -> tuple[list[float], bytes]:
    """The native build's losses for `steps` corpus steps from init_state, and its exported state."""
    from support.tinygpt_native import NativeModel, ensure_built
    from python_ref.config import model_config, train_config
    ensure_built()
    train_cfg = train_config(preset)
    with NativeModel(model_config(preset), batch=train_cfg.batch, n_threads=threads) as m:
        m.import_state(init_state)
        m.set_hyper_from(train_cfg)
        m.set_corpus(CORPUS.read_bytes(), train_cfg.valFraction)
        m.set_data_state(train_cfg.seed, 0)
        losses = [m.train_step() for _ in range(steps)]
        return losses, m.export_state(with_moments=True)


def state_floats(state: bytes):
    import numpy as np
    return np.frombuffer(state, dtype="<f4", offset=4)


def max_rel_state_diff(a: bytes, b: bytes, blocks: int = 3) -> float:
    """Max |a-b| over each block of two states (weights, m, v) relative to that block's max |b|:
    elementwise relative error is meaningless for values that pass through zero."""
    import numpy as np
    x, y = state_floats(a).astype(np.float64), state_floats(b).astype(np.float64)
    assert x.shape == y.shape and a[:4] == b[:4]
    worst = 0.0
    for xb, yb in zip(np.split(x, blocks), np.split(y, blocks)):
        worst = max(worst, float(np.abs(xb - yb).max() / max(np.abs(yb).max(), 1e-30)))
    return worst
