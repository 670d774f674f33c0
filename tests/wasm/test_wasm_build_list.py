"""wasm/builds.json, the one list of WebAssembly builds: its needs agree with its flags, the server
requires exactly its builds, and the loader's module copy (builds.js) is current."""
import json

import pytest

from conftest import BUILD, ROOT
from server.cli import REQUIRED_BUILDS

BUILDS = json.loads((ROOT / "wasm" / "builds.json").read_text())
NEED_FLAGS = {"simd": "-msimd128", "relaxedSimd": "-mrelaxed-simd", "threads": "-pthread", "memory64": "-sMEMORY64=1"}


def test_needs_agree_with_the_compile_flags():
    for build in BUILDS["builds"]:
        flags = set(build["compileFlags"])
        print(f"{build['name']}: {build['compileFlags']} needs {build['needs']}, {build['memoryGiB']} GiB")
        assert {need: flag in flags for need, flag in NEED_FLAGS.items()} == build["needs"], build["name"]


def test_server_requires_every_build():
    assert REQUIRED_BUILDS == tuple(b["name"] for b in BUILDS["builds"])


@pytest.mark.parametrize("where", [BUILD / "wasm", ROOT / "site" / "static" / "wasm"])
def test_loader_module_is_the_list(where):
    module = where / "builds.js"
    if not module.exists():
        pytest.fail(f"{module} is missing: run `make build` (scripts/build_wasm.sh) first")
    text = module.read_text()
    assert text.startswith("export default ") and text.rstrip().endswith(";")
    assert json.loads(text.removeprefix("export default ").rstrip().removesuffix(";")) == BUILDS
