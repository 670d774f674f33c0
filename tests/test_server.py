"""server/: the headers come from `_headers` and reach every response of the real server process,
files get the types browsers insist on, the page lists presets.json's presets, /webgpu/ serves the
WebGPU trainer's runtime and nothing else of webgpu/, and `build` writes a static dist/ with the
same headers file and that runtime (and refuses a target that would replace the repo)."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from conftest import ROOT
from server.headers import HEADERS_FILE, global_headers
from server_process import require_site_builds, running_server

ISOLATION = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}


def fetch(url: str):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_headers_file_asks_for_cross_origin_isolation():
    headers = global_headers()
    print(f"\n_headers: {headers}")
    assert ISOLATION.items() <= headers.items()


def test_headers_file_errors_are_clear(tmp_path):
    bad = tmp_path / "_headers"
    bad.write_text("/*\n  Cross-Origin-Opener-Policy same-origin\n")
    with pytest.raises(ValueError, match="expected 'Name: value'"):
        global_headers(bad)
    bad.write_text("/other\n  X-A: b\n")
    with pytest.raises(ValueError, match="no headers under a '/\\*' rule"):
        global_headers(bad)


@pytest.fixture(scope="module")
def server_url():
    with running_server() as url:
        yield url


@pytest.mark.parametrize("path,content_type", [
    ("/", "text/html"),
    ("/static/js/app.js", "text/javascript"),
    ("/static/js/worker.js", "text/javascript"),
    ("/webgpu/trainer.js", "text/javascript"),
    ("/webgpu/kernels/matmul.js", "text/javascript"),
    ("/static/wasm/relaxed/tinygpt.mjs", "text/javascript"),
    ("/static/wasm/relaxed/tinygpt.wasm", "application/wasm"),
    ("/static/presets.json", "application/json"),
])
def test_every_response_carries_the_headers(server_url, path, content_type):
    if path.startswith("/static/wasm/"):
        require_site_builds()
    status, headers, _ = fetch(server_url + path)
    assert status == 200
    assert headers["Content-Type"].startswith(content_type)
    for name, value in global_headers().items():
        assert headers[name] == value, name


def test_a_missing_file_is_a_404_with_the_headers(server_url):
    status, headers, _ = fetch(server_url + "/static/no-such-file.js")
    assert status == 404
    assert headers["Cross-Origin-Embedder-Policy"] == "require-corp"


@pytest.mark.parametrize("path", [
    "/webgpu/package.json", "/webgpu/package-lock.json", "/webgpu/node_modules/webgpu/package.json",
    "/webgpu/tools/browser_entry.js", "/webgpu/bench/bench.mjs", "/webgpu/node_gpu.js", "/webgpu/README.md",
    "/webgpu/kernels/../node_gpu.js",
])
def test_webgpu_serves_only_the_runtime(server_url, path):
    status, headers, _ = fetch(server_url + path)
    print(f"\n{path}: {status}")
    assert status == 404
    assert headers["Cross-Origin-Embedder-Policy"] == "require-corp"


def test_webgpu_runtime_imports_only_runtime_files():
    """Every relative import of a served runtime file is itself served: the page gets the whole trainer."""
    import posixpath
    import re

    from server.app import WEBGPU, webgpu_runtime_files

    served = set(webgpu_runtime_files())
    imports = {posixpath.normpath(posixpath.join(posixpath.dirname(f), m))
               for f in served for m in re.findall(r'from\s+"(\.[^"]+)"', (WEBGPU / f).read_text())}
    print(f"\n{len(served)} runtime files, {len(imports)} distinct imports; unserved: {sorted(imports - served) or 'none'}")
    assert imports <= served and "trainer.js" in served


def test_page_lists_the_presets_of_presets_json(server_url):
    presets = json.loads((ROOT / "site/static/presets.json").read_text())
    _, _, body = fetch(server_url + "/")
    html = body.decode()
    for name in presets["presets"]:
        assert f'<option value="{name}"' in html
    assert f'<option value="{presets["defaultPreset"]}" selected' in html


def run_build(out) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server", "build", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_build_writes_a_static_site_with_the_same_headers(tmp_path):
    out = tmp_path / "dist"
    r = run_build(out)
    assert r.returncode == 0, r.stderr
    assert (out / "_headers").read_bytes() == HEADERS_FILE.read_bytes()
    assert "<option value=\"tiny\"" in (out / "index.html").read_text()
    assert (out / "static/js/worker.js").exists() and (out / "static/wasm/relaxed/tinygpt.wasm").exists()
    # the WebGPU runtime, where the worker imports it (../../webgpu/trainer.js), and nothing else of webgpu/
    webgpu = sorted(p.relative_to(out / "webgpu").as_posix() for p in (out / "webgpu").rglob("*") if p.is_file())
    print(f"\ndist/webgpu: {webgpu}")
    assert {"trainer.js", "prng.js", "ops.js", "plan.js", "kernels/matmul.js", "kernels/attention.js"} <= set(webgpu)
    assert all(p.endswith(".js") and not p.startswith(("tools/", "bench/", "node_modules/")) for p in webgpu)
    assert (out / "webgpu/trainer.js").read_bytes() == (ROOT / "webgpu/trainer.js").read_bytes()
    # A second build replaces the first one whole: nothing stale survives.
    (out / "stale.txt").write_text("from an older build")
    assert run_build(out).returncode == 0
    assert not (out / "stale.txt").exists()


@pytest.mark.parametrize("target,why", [
    (ROOT, "it holds the repository"),
    (ROOT / "site" / "static" / "dist", "inside site/"),
    (ROOT / "server", "not an earlier build"),
])
def test_build_refuses_to_replace_anything_but_an_earlier_build(target, why):
    before = sorted(p.name for p in target.iterdir()) if target.exists() else None
    r = run_build(target)
    print(f"\n{r.stderr.strip()}")
    assert r.returncode == 1 and "refusing to replace" in r.stderr and why in r.stderr
    assert (sorted(p.name for p in target.iterdir()) if target.exists() else None) == before
