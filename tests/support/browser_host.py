"""Headless Chromium (Debian's, through Playwright) as the WebGPU test host: SwiftShader adapter.

The page is served from the repository root under https://tinygpt.test/ by Playwright's request
routing (no server process, and an https origin, so WebGPU is allowed). Tests call the functions of
tests/webgpu/hosts/browser_entry.js through page.evaluate. A software adapter: correctness only.
"""
from __future__ import annotations

import base64
import mimetypes
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ORIGIN = "https://tinygpt.test"
ARGS = ["--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-vulkan=swiftshader",
        "--use-webgpu-adapter=swiftshader", "--disable-vulkan-surface", "--no-sandbox"]
TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".json": "application/json", ".html": "text/html"}


class BrowserHost:
    def __init__(self):
        from playwright.sync_api import sync_playwright  # imported here: only WebGPU tests need it

        if not CHROMIUM.exists():
            raise RuntimeError(f"{CHROMIUM} is missing: `make setup` installs Debian's chromium")
        self._pw = sync_playwright().start()
        self.browser = None
        try:
            self.browser = self._pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
            self.page = self.browser.new_page()
            self.console: list[str] = []
            self.page.on("console", lambda m: self.console.append(m.text))
            self.page.route(f"{ORIGIN}/**", self._serve)
            self.page.goto(f"{ORIGIN}/tests/webgpu/hosts/host.html")
        except BaseException:
            self.close()  # a Playwright left running fails every later test of this process that starts one
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _serve(self, route):
        rel = route.request.url[len(ORIGIN) + 1:].split("?")[0]
        path = (ROOT / rel).resolve()
        if ROOT not in path.parents or not path.is_file():
            return route.fulfill(status=404, body=f"not found: {rel}")
        kind = TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        route.fulfill(status=200, body=path.read_bytes(), content_type=kind)

    def call(self, function: str, *args):
        """await browser_entry.<function>(...args) in the page; returns its JSON-able result."""
        return self.page.evaluate(
            "async ([f, args]) => (await import('/tests/webgpu/hosts/browser_entry.js'))[f](...args)",
            [function, list(args)])

    def close(self):
        try:
            if self.browser is not None:
                self.browser.close()
        finally:
            self._pw.stop()


def b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def from_b64(s: str, dtype=np.float32) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype=dtype)
