"""Shared by the WebAssembly tests: the builds' location, a Node runner for tests/wasm/node_driver.mjs,
a local static server (with or without COOP/COEP) and a headless Chromium driven by playwright.

Everything runs real parts: the Emscripten builds from `make`, the system Node, Debian's chromium.
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import BUILD, ROOT
from python_ref.config import presets_file
from server.headers import global_headers

WASM_DIR = BUILD / "wasm"
NATIVE_LIB = BUILD / "native" / "libtinygpt.so"
CORPUS = ROOT / "site" / "static" / "data" / "tinyshakespeare.txt"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def require_build(build: str) -> Path:
    path = WASM_DIR / build / "tinygpt.mjs"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make build` (wasm/scripts/build_wasm.sh) first")
    return path


def model_spec(preset: str, **overrides) -> dict:
    """Scenario config + training settings for a preset, straight from presets.json."""
    p = presets_file()
    cfg = dict(p["presets"][preset])
    config = {k: cfg[k] for k in ("nLayer", "nHead", "dModel", "ctx", "batch")}
    config.update(vocabSize=p["model"]["vocabSize"], layerNormEps=p["model"]["layerNormEps"],
                  initStd=p["model"]["initStd"])
    config.update(overrides)
    return {"config": config, "training": dict(p["training"])}


def node_flags(spec: dict) -> list[str]:
    """Node 20's V8 has relaxed SIMD only behind a flag: on for the relaxed build (or when a loader
    test asks for it), off otherwise, so the loader's probe sees what a default Node offers."""
    relaxed = spec.get("relaxedSimdFlag", spec.get("build") == "relaxed")
    return ["--experimental-wasm-relaxed-simd"] if relaxed else []


def node_scenario(spec: dict, tmp_path: Path, timeout: float = 600) -> dict:
    """Runs one scenario in Node; returns its JSON result, which has an "error" (with Node's stderr) when
    it failed. Benchmarks record that error; tests fail on it (run_node)."""
    spec = dict(spec, wasmDir=str(WASM_DIR))
    spec_path = tmp_path / f"spec-{os.getpid()}-{id(spec)}.json"
    spec_path.write_text(json.dumps(spec))
    proc = subprocess.run(["node", *node_flags(spec), str(ROOT / "tests" / "wasm" / "node_driver.mjs"), str(spec_path)],
                          capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"error": "no result"}
    if proc.returncode != 0 or "error" in result:
        result["error"] = f"{result.get('error', f'exit code {proc.returncode}')}\n{proc.stderr[-3000:]}".strip()
    return result


def run_node(spec: dict, tmp_path: Path, timeout: float = 600) -> dict:
    """Runs one scenario in Node; returns its JSON result (fails the test with Node's error)."""
    result = node_scenario(spec, tmp_path, timeout)
    if "error" in result:
        pytest.fail(f"node scenario failed ({spec.get('build')}): {result['error']}")
    return result


PLAYGROUND_HEADERS = global_headers()


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the repo at /, $BUILD/wasm at /build-wasm/ and a test's files at /files/;
    cross-origin isolated (COOP/COEP) unless isolated is False. Types of .js/.mjs/.wasm: see
    server.headers, which registers them."""
    isolated = True
    files_dir: Path | None = None

    def translate_path(self, path):
        clean = path.split("?", 1)[0].split("#", 1)[0]
        if clean.startswith("/build-wasm/"):
            return str(WASM_DIR / clean[len("/build-wasm/"):])
        if clean.startswith("/files/") and self.files_dir is not None:
            return str(self.files_dir / clean[len("/files/"):])
        return super().translate_path(path)

    def end_headers(self):
        if self.isolated:  # the playground's own headers (COOP/COEP ...), from the repo's _headers file
            for name, value in PLAYGROUND_HEADERS.items():
                self.send_header(name, value)
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def static_server(isolated: bool = True, files_dir: Path | None = None):
    """A local server on 127.0.0.1 (random port) for the duration of the block; yields its base URL."""
    handler = type("Handler", (_Handler,), {"isolated": isolated, "files_dir": files_dir})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(handler, directory=str(ROOT)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def headless_chromium(base_url: str):
    """A headless Chromium (Debian's, never a playwright download) on tests/wasm/browser_page.html.
    Without playwright: ImportError; without chromium: RuntimeError (benchmarks record either; tests
    use chromium_page)."""
    from playwright import sync_api
    exe = shutil.which("chromium")
    if not exe:
        raise RuntimeError("chromium is not installed (make setup installs the Debian package)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            console = []
            page.on("console", lambda msg: console.append(msg.text))
            page.goto(f"{base_url}/tests/wasm/browser_page.html")
            page.wait_for_function("window.tinygptReady === true")
            page.console_log = console
            yield page
        finally:
            browser.close()


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
    tc = train_config(preset)
    with NativeModel(model_config(preset), batch=tc.batch, n_threads=threads) as m:
        m.import_state(init_state)
        m.set_hyper_from(tc)
        m.set_corpus(CORPUS.read_bytes(), tc.valFraction)
        m.set_data_state(tc.seed, 0)
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
