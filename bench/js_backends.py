"""The backends of `tinygpt bench --all` that a JavaScript engine runs: each WebAssembly build in Node
and in a headless Chromium module worker, through the same drivers as the tests and
bench/wasm/builds.py (tests/wasm/*.mjs via tests/support/wasm_support.py), and the WGSL
trainer in Node + Dawn (bench/webgpu/bench.mjs).

Each runs a given number of steps, so a cell's count is sized from what the run has measured so far
(Budget.count). WGSL gives a figure only on a hardware adapter: a software one (SwiftShader, llvmpipe)
runs the WGSL correctly but says nothing about a GPU's speed.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .backends import Backend, Unavailable, build_dir, checkout

WASM_METHOD = ("bench/wasm/scenario.mjs 'fixed-batch' (as bench/wasm/builds.py): median of the "
               "timed steps, after 1 warm-up step")


def require_node() -> None:
    if shutil.which("node") is None:
        raise Unavailable("no `node` on PATH")


def require_wasm_build(build: str) -> None:
    path = build_dir() / "wasm" / build / "tinygpt.mjs"
    if not path.exists():
        raise Unavailable(f"{path} is missing: run `make build`")


def _threads_label(threads: int) -> str:
    return f"{threads} thread{'s' * (threads > 1)}"


class WasmNode(Backend):
    family = "WASM in Node"
    method = WASM_METHOD

    def __init__(self, build: str, threads: int):
        self.build, self.threads = build, threads
        self.key = f"wasm-node-{build}"
        self.label = f"WASM {build}, Node, {_threads_label(threads)}"

    def start(self, stack):
        checkout()
        require_node()
        require_wasm_build(self.build)
        from bench.hosts import node_scenario
        from bench.wasm.builds import fixed_batch_spec, step_ms

        self.node_scenario, self.spec, self.step_ms = node_scenario, fixed_batch_spec, step_ms
        self.tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tinygpt-bench-")))

    def measure(self, preset, budget, estimate_ms):
        steps = budget.count(estimate_ms)
        result = self.node_scenario(self.spec(preset, self.build, self.threads, steps + 1), self.tmp)
        if "error" in result:
            raise RuntimeError(result["error"])
        return {"ms_per_step": self.step_ms(result), "steps": steps, "threads": result.get("nThreads")}


class ChromiumSession:
    """One headless Chromium (and the local server it loads the test page from) shared by every
    Chromium backend: started by the first one, and its failure is every one's reason."""

    def __init__(self):
        self.page = None
        self.failure: str | None = None

    def open(self, stack) -> object:
        if self.page is None and self.failure is None:
            try:
                self.page = self._start(stack)
            except Unavailable as e:
                self.failure = str(e)
            except Exception as e:  # playwright or the browser failed to start: say so, measure the rest
                self.failure = f"headless Chromium did not start: {type(e).__name__}: {e}"
        if self.failure:
            raise Unavailable(self.failure)
        return self.page

    @staticmethod
    def _start(stack):
        checkout()
        if shutil.which("chromium") is None:
            raise Unavailable("no `chromium` on PATH")
        try:
            import playwright.sync_api  # noqa: F401  (headless_chromium imports it; checked here to say so)
        except ImportError:
            raise Unavailable("playwright is not installed (make setup)") from None
        from bench.hosts import headless_chromium, static_server

        url = stack.enter_context(static_server(isolated=True))
        page = stack.enter_context(headless_chromium(url))
        page.set_default_timeout(3_600_000)  # a scalar step at a big preset takes seconds
        return page


class WasmChromium(Backend):
    family = "WASM in Chromium"
    method = WASM_METHOD + ", in a module worker of a cross-origin isolated page"

    def __init__(self, build: str, threads: int, session: ChromiumSession):
        self.build, self.threads, self.session = build, threads, session
        self.key = f"wasm-chromium-{build}"
        self.label = f"WASM {build}, Chromium, {_threads_label(threads)}"

    def start(self, stack):
        checkout()
        require_wasm_build(self.build)
        from bench.wasm.builds import fixed_batch_spec, step_ms

        self.spec, self.step_ms = fixed_batch_spec, step_ms
        self.page = self.session.open(stack)

    def measure(self, preset, budget, estimate_ms):
        steps = budget.count(estimate_ms)
        result = self.page.evaluate("spec => window.runInWorker(spec)",
                                    self.spec(preset, self.build, self.threads, steps + 1))
        if "error" in result:
            raise RuntimeError(result["error"])
        if result.get("build") != self.build:  # the loader fell back: this browser cannot run the build
            raise RuntimeError(f"the loader ran {result.get('build')} instead: {result.get('reason')}")
        return {"ms_per_step": self.step_ms(result), "steps": steps, "threads": result.get("threads")}


# Chromium's own SwiftShader Vulkan driver (webgpu/webgpu.mk): where the tests find their adapter
SWIFTSHADER_ICD = Path("/usr/lib/chromium/vk_swiftshader_icd.json")
SOFTWARE_ADAPTER = re.compile(r"swiftshader|llvmpipe|lavapipe|softpipe|software|\bwarp\b|basic render|\bcpu\b", re.I)
WGSL_WARMUP = 3


def is_software_adapter(adapter: dict) -> bool:
    """A CPU rasteriser behind WebGPU: Dawn's fallback flag, or a known software driver's name."""
    names = " ".join(str(adapter.get(k) or "") for k in ("vendor", "architecture", "device", "description"))
    return bool(adapter.get("isFallbackAdapter")) or bool(SOFTWARE_ADAPTER.search(names))


def adapter_name(adapter: dict) -> str:
    parts = [adapter.get("description"), "/".join(p for p in (adapter.get("vendor"), adapter.get("architecture")) if p)]
    return ", ".join(p for p in parts if p) or "unnamed adapter"


def last_json_line(stdout: str) -> dict | None:
    """Dawn prints its own lines on stdout too: the result is the last line that is a JSON object."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


class WgslNode(Backend):
    family = "WGSL"
    key = "wgsl-node"
    label = "WGSL, Node + Dawn"
    method = (f"bench/webgpu/bench.mjs: mean of the timed steps (one submit each), after {WGSL_WARMUP} warm-up "
              "steps; on a hardware adapter only")

    def start(self, stack):
        self.root = checkout()
        require_node()
        if not (self.root / "webgpu" / "node_modules" / "webgpu").exists():
            raise Unavailable("webgpu/node_modules/webgpu (the npm `webgpu` package) is missing: run `make setup`")
        adapter, how = self.find_adapter()
        if is_software_adapter(adapter):
            raise Unavailable(f"software adapter {adapter_name(adapter)}{how}, no speed figure")
        self.adapter = adapter

    def run_bench(self, *args: str, env: dict | None = None) -> str:
        """bench.mjs's stdout; RuntimeError with its stderr when it fails."""
        proc = subprocess.run(["node", "bench/webgpu/bench.mjs", *args], cwd=self.root, capture_output=True,
                              text=True, env=env, timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"bench.mjs exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        return proc.stdout

    def adapter_info(self, env: dict | None = None) -> dict:
        info = last_json_line(self.run_bench("--adapter-only", "1", env=env))
        if info is None:
            raise RuntimeError("bench.mjs --adapter-only printed no adapter")
        return info

    def find_adapter(self) -> tuple[dict, str]:
        """(the adapter Dawn takes here, how it was found). Where Dawn finds none by itself, the tests'
        SwiftShader driver is tried too, so the reason names the adapter this machine really has."""
        try:
            return self.adapter_info(), ""
        except RuntimeError as e:
            if "VK_ICD_FILENAMES" in os.environ or not SWIFTSHADER_ICD.exists():
                raise Unavailable(f"no WebGPU adapter in Node + Dawn: {e}") from None
            try:
                env = dict(os.environ, VK_ICD_FILENAMES=str(SWIFTSHADER_ICD))
                return (self.adapter_info(env),
                        " (the only adapter here: Dawn finds none without VK_ICD_FILENAMES pointing at it)")
            except RuntimeError:
                raise Unavailable(f"no WebGPU adapter in Node + Dawn: {e}") from None

    def measure(self, preset, budget, estimate_ms):
        steps = budget.count(estimate_ms)
        with tempfile.TemporaryDirectory(prefix="tinygpt-wgsl-") as tmp:
            out = Path(tmp) / "bench.json"
            self.run_bench("--presets", preset, "--steps", str(steps), "--warmup", str(WGSL_WARMUP), "--sizes", "",
                           "--out", str(out))
            result = json.loads(out.read_text())
        if is_software_adapter(result["adapter"]):  # the adapter checked at start, unless the driver changed
            raise RuntimeError(f"ran on a software adapter ({adapter_name(result['adapter'])}): no speed figure")
        (row,) = result["presets"]
        return {"ms_per_step": row["msPerStep"], "steps": steps, "setup_s": row["setupMs"] / 1e3}


def chromium_args() -> list[str]:
    """More Chromium flags from TINYGPT_CHROMIUM_ARGS: a GPU server without a display needs
    --use-angle=vulkan (docs/lab/2026-11-29-wgsl-trainer-in-chromium.md §43)."""
    return os.environ.get("TINYGPT_CHROMIUM_ARGS", "").split()


def run_browser_bench(*args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    """bench/webgpu/browser_bench.py of the checkout with TINYGPT_CHROMIUM_ARGS's flags."""
    flags = [f"--browser-arg={a}" for a in chromium_args()]
    return subprocess.run([sys.executable, str(checkout() / "bench/webgpu/browser_bench.py"), *args, *flags,
                           *(["--out", str(out)] if out else [])], capture_output=True, text=True, timeout=3600)


@functools.lru_cache(maxsize=1)
def chromium_webgpu_refusal() -> str | None:
    """Why headless Chromium's WebGPU gives no speed figure here (no browser, no adapter, a software
    one), or None on a hardware adapter. Asked once a process: every Chromium series and the page's
    decode share the answer."""
    checkout()
    if shutil.which("chromium") is None:
        return "no `chromium` on PATH"
    proc = run_browser_bench("--presets", "")
    if proc.returncode == 2:  # the bench's refusal: a software adapter
        return f"{proc.stderr.strip().splitlines()[-1]} (headless Chromium)"
    if proc.returncode != 0:
        return f"no WebGPU adapter in headless Chromium: {proc.stderr.strip()[-500:]}"
    return None


class WgslChromium(Backend):
    """The WGSL trainer in a module worker of headless Chromium's WebGPU (bench/webgpu/browser_bench.py),
    Chromium started afresh for each cell, as WgslNode starts Node; its steps timed in blocks, each
    drained before the next, as bench.mjs times them under Node."""
    family = "WGSL in Chromium"
    key = "wgsl-chromium"
    label = "WGSL, Chromium"
    method = (f"bench/webgpu/browser_bench.py: mean of the timed steps in the page's module worker (one submit "
              f"each), after {WGSL_WARMUP} warm-up steps; on a hardware adapter only")

    def start(self, stack):
        self.root = checkout()
        if why := chromium_webgpu_refusal():
            raise Unavailable(why)

    def run_bench(self, *args: str, out: Path | None = None) -> subprocess.CompletedProcess:
        return run_browser_bench(*args, out=out)

    def page_row(self, preset: str, *args: str) -> tuple[dict, str]:
        """(browser_bench.py's entry for the preset, the browser's version)."""
        with tempfile.TemporaryDirectory(prefix="tinygpt-wgsl-chromium-") as tmp:
            out = Path(tmp) / "browser.json"
            proc = self.run_bench("--presets", preset, "--warmup", str(WGSL_WARMUP), *args, out=out)
            if proc.returncode != 0:
                raise RuntimeError(f"browser_bench.py exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")
            result = json.loads(out.read_text())
        (row,) = result["presets"]
        return row, result["browser"]

    def measure(self, preset, budget, estimate_ms):
        steps = budget.count(estimate_ms)
        row, browser = self.page_row(preset, "--steps", str(steps))
        return {"ms_per_step": row["msPerStep"], "steps": steps, "setup_s": row["setupMs"] / 1e3, "browser": browser}


class WgslChromiumPageLoop(WgslChromium):
    """The same trainer in the page's own training loop (site/static/js/step_stream.js, as the page's
    worker runs it: bursts with the GPU's steps kept queued from one to the next, the worker's yield
    between them): the speed a person's page trains at (docs/lab/2026-11-29-decode-chain.md §46). Each cell also keeps
    the same loop draining its queue after every burst, the page before §46, as drained_each_burst_ms."""
    key = "wgsl-chromium-page"
    label = "WGSL, the page's loop, Chromium"
    method = (f"bench/webgpu/browser_bench.py --page-loop: one round of the timed steps in the page's training "
              f"loop (step_stream.js), after {WGSL_WARMUP} warm-up steps; on a hardware adapter only")

    def measure(self, preset, budget, estimate_ms):
        steps = budget.count(estimate_ms)  # a round, timed twice: kept queued, then drained each burst
        row, browser = self.page_row(preset, "--steps", "1", "--page-loop", str(steps))
        return {"ms_per_step": row["pageLoopMs"], "steps": steps, "setup_s": row["setupMs"] / 1e3, "browser": browser,
                "drained_each_burst_ms": row["drainedEachBurstMs"]}
