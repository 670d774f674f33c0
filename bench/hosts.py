"""What runs the product for the benchmarks and the tests alike: the WebAssembly builds' location, a Node
runner for bench/wasm/node_driver.mjs (one training scenario against a build), a local static server
(with or without COOP/COEP), a headless Chromium (Debian's, through playwright) on
bench/wasm/browser_page.html, and the real playground server as a child process.

Everything runs real parts: the Emscripten builds from `make`, the system Node, Debian's chromium. The
tests wrap these (tests/support/) to fail a test where a benchmark records an error.
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from python_ref.config import presets_file
from python_ref.resources import ROOT
from server.headers import global_headers

BUILD = Path(os.environ.get("TINYGPT_BUILD", ROOT / "build"))
WASM_DIR = BUILD / "wasm"
NATIVE_LIB = BUILD / "native" / "libtinygpt.so"
CORPUS = ROOT / "site" / "static" / "data" / "tinyshakespeare.txt"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
WASM_HOSTS = Path(__file__).resolve().parent / "wasm"


def model_spec(preset: str, **overrides) -> dict:
    """Scenario config + training settings for a preset, straight from presets.json."""
    p = presets_file()
    entry = p["presets"][preset]
    config = {k: entry[k] for k in ("nLayer", "nHead", "dModel", "ctx", "batch")}
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
    proc = subprocess.run(["node", *node_flags(spec), str(WASM_HOSTS / "node_driver.mjs"), str(spec_path)],
                          capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"error": "no result"}
    if proc.returncode != 0 or "error" in result:
        result["error"] = f"{result.get('error', f'exit code {proc.returncode}')}\n{proc.stderr[-3000:]}".strip()
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
    """A headless Chromium (Debian's, never a playwright download) on bench/wasm/browser_page.html.
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
            page.goto(f"{base_url}/bench/wasm/browser_page.html")
            page.wait_for_function("() => window.tinygptReady === true")  # a function: the CSP allows no eval()
            page.console_log = console
            yield page
        finally:
            browser.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(args: list[str] | None = None, ready_path: str = "/", cwd: Path = ROOT, env: dict | None = None,
                   options: list[str] = ()):
    """Yields the base URL of a fresh `tinygpt serve` (or of `args`, a command that serves
    on the port it is given as {port}, run in `cwd` with `env`), `options` added to serve's; stops it afterwards."""
    port = free_port()
    cmd = [a.format(port=port) for a in args] if args else [
        sys.executable, "-m", "python_ref.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *options]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env or dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + ready_path, timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {' '.join(cmd)}\n{proc.stdout.read()}")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
