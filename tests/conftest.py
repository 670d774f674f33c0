import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("TINYGPT_BUILD", ROOT / "build"))
# SwiftShader's Vulkan ICD, as Debian's chromium ships it: Node's `webgpu` (Dawn) runs on it in the tests
SWIFTSHADER_ICD = "/usr/lib/chromium/vk_swiftshader_icd.json"


def swiftshader_env(**extra):
    """The environment of a Node process whose WebGPU device is SwiftShader (correctness only, never speed)."""
    return dict(os.environ, VK_ICD_FILENAMES=SWIFTSHADER_ICD, **extra)


def pytest_collection_modifyitems(items):
    """The folders that drive a browser or a software GPU throughout are marked here, so the fast lane
    (`make test-fast`: -m "not browser and not swiftshader") needs no marker in each of their files.
    Elsewhere a test that starts Chromium or WebGPU on SwiftShader carries its marker itself."""
    for item in items:
        folder = Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if folder == "e2e":
            item.add_marker(pytest.mark.browser)
        elif folder == "webgpu":
            item.add_marker(pytest.mark.swiftshader)


@pytest.fixture(autouse=True, scope="session")
def torch_one_thread():
    """The tests' shapes are tiny: on 2 shared cores torch's spinning second thread made them ~10-40x slower.

    Benchmarks set their own thread count; tests never time anything.
    """
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
