"""Every training backend `tinygpt bench --all` knows, in the order a chart shows them: the ones that
run in this process (backends.py) and the ones a JavaScript engine runs (js_backends.py)."""
from __future__ import annotations

from .backends import Backend, Native, PyTorchCPU, PyTorchCUDA, wasm_builds
from .js_backends import ChromiumSession, WasmChromium, WasmNode, WgslChromium, WgslChromiumPageLoop, WgslNode


def catalogue(threads: int) -> list[Backend]:
    """Every backend, CPU ones before GPU ones within each engine; `threads` is the 'all cores' count."""
    backends: list[Backend] = [PyTorchCPU(threads)]
    backends += [PyTorchCUDA(mode) for mode in ("eager", "cudagraph", "cudagraph+compile")]
    backends += [Native(t) for t in sorted({1, threads})]
    builds = wasm_builds()
    # a threaded build runs on every core (what it is for), the others on one
    backends += [WasmNode(b["name"], threads if b["needs"]["threads"] else 1)
                 for b in builds if "node" in b["environment"]]
    chromium = ChromiumSession()
    backends += [WasmChromium(b["name"], threads if b["needs"]["threads"] else 1, chromium)
                 for b in builds if "worker" in b["environment"]]
    backends += [WgslNode(), WgslChromium(), WgslChromiumPageLoop()]
    return backends
