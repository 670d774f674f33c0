"""bench/js_backends.py: a software WebGPU adapter (SwiftShader, llvmpipe, Dawn's fallback) is told
from a GPU, so WGSL never gives a speed figure on one; and the adapter this machine offers is named."""
from __future__ import annotations

import contextlib
import shutil

import pytest

from bench.backends import Unavailable
from bench.js_backends import WgslNode, adapter_name, is_software_adapter

SWIFTSHADER = {"vendor": "google", "architecture": "swiftshader", "device": "swiftshader-device-subzero-",
               "description": "SwiftShader driver 5.0.0", "isFallbackAdapter": True}
LLVMPIPE = {"vendor": "mesa", "architecture": "", "device": "", "description": "llvmpipe (LLVM 15.0.6, 256 bits)"}
H200 = {"vendor": "nvidia", "architecture": "hopper", "device": "", "description": "NVIDIA H200: 580.159.04",
        "isFallbackAdapter": False}


@pytest.mark.parametrize("adapter,software", [(SWIFTSHADER, True), (LLVMPIPE, True), (H200, False),
                                              (dict(H200, isFallbackAdapter=True), True)])
def test_software_adapters_are_told_from_gpus(adapter, software):
    print(f"{adapter_name(adapter)}: software {is_software_adapter(adapter)}")
    assert is_software_adapter(adapter) is software


def test_wgsl_on_this_machine_is_a_gpu_or_skipped_naming_its_adapter():
    if shutil.which("node") is None:
        pytest.skip("no node here")
    backend = WgslNode()
    with contextlib.ExitStack() as stack:
        try:
            backend.start(stack)
        except Unavailable as e:
            print(f"wgsl-node skipped: {e}")
            assert "software adapter" in str(e) or "no WebGPU adapter" in str(e) or "missing" in str(e)
            return
    print(f"wgsl-node on {adapter_name(backend.adapter)}")
    assert not is_software_adapter(backend.adapter)
