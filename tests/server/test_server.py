"""server/: the headers come from `_headers` and reach every response of the real server process
(pages, files, gzipped, 304 and 404 ones), files get the types browsers insist on, the page lists
presets.json's presets, /webgpu/ serves the WebGPU trainer's runtime and nothing else of webgpu/,
the docs pages render from docs/*.md with their charts, a missing path gets the styled 404 page,
and `build` writes a static dist/ with the same headers file, that runtime, the docs pages and
404.html (and refuses a target that would replace the repo)."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT
from server.headers import HEADERS_FILE, global_headers
from support.server_process import require_site_builds, running_server

ISOLATION = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}


def fetch(url: str, headers: dict[str, str] | None = None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
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
    "/tests/webgpu/hosts/browser_entry.js", "/bench/webgpu/bench.mjs", "/webgpu/node_gpu.js", "/webgpu/README.md",
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
    print(f"\n{len(served)} runtime files, {len(imports)} distinct imports; "
          f"unserved: {sorted(imports - served) or 'none'}")
    assert imports <= served and "trainer.js" in served


def test_page_lists_the_presets_of_presets_json(server_url):
    presets = json.loads((ROOT / "site/static/presets.json").read_text())
    _, _, body = fetch(server_url + "/")
    html = body.decode()
    for name in presets["presets"]:
        assert f'<option value="{name}"' in html
    assert f'<option value="{presets["defaultPreset"]}" selected' in html


def run_build(out) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "python_ref.cli", "build", "--out", str(out)], cwd=ROOT,
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
    # __pycache__ left out: a test in another process that first imports server/ writes it meanwhile
    def listing():
        return sorted(p.name for p in target.iterdir() if p.name != "__pycache__") if target.exists() else None

    before = listing()
    r = run_build(target)
    print(f"\n{r.stderr.strip()}")
    assert r.returncode == 1 and "refusing to replace" in r.stderr and why in r.stderr
    assert listing() == before


def assert_global_headers(headers):
    for name, value in global_headers().items():
        assert headers[name] == value, name


@pytest.mark.parametrize("name", ["learn", "format", "performance", "architecture", "determinism"])
def test_docs_pages_render_with_the_headers(server_url, name):
    from server.docs_pages import PAGES

    status, headers, body = fetch(f"{server_url}/{name}")
    html = body.decode()
    print(f"\n/{name}: {status}, {len(body)} bytes")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert_global_headers(headers)
    assert '<article class="doc">' in html and "<h1 id=" in html
    assert f'<a href="{name}" aria-current="page">{PAGES[name]}</a>' in html
    assert 'href="static/css/docs.css"' in html and 'href="static/favicon.svg"' in html


def test_playground_header_links_every_docs_page_of_the_brief(server_url):
    _, _, body = fetch(server_url + "/")
    html = body.decode()
    for name in ("learn", "format", "performance"):
        assert f'<a href="{name}">' in html
    assert '<link rel="icon" href="static/favicon.svg" type="image/svg+xml">' in html


def test_links_between_docs_become_links_between_pages(tmp_path):
    from server.app import template_env
    from server.docs_pages import render_doc

    (tmp_path / "format.md").write_text(
        "# Format\n\n## Header keys\n\nSee [speed](performance.md#3-webassembly-builds-issue-4-cpu-box), "
        "[learn](./learn.md), [code](../python_ref/model.py) and [elsewhere](other.md).\n\n## Header keys\n")
    html = render_doc(template_env(), "format", docs=tmp_path)
    print(f"\n{html[html.index('<article'):html.index('</article>')]}")
    assert '<a href="performance#3-webassembly-builds-issue-4-cpu-box">' in html
    assert '<a href="learn">' in html
    assert '<a href="../python_ref/model.py">' in html and '<a href="other.md">' in html  # not pages: untouched
    assert '<h2 id="header-keys">' in html and '<h2 id="header-keys-1">' in html  # GitHub's anchors


def test_an_edited_doc_renders_anew(tmp_path):
    import os

    from server.app import template_env
    from server.docs_pages import render_doc

    doc = tmp_path / "learn.md"
    doc.write_text("# First\n")
    assert "<h1 id=\"first\">First</h1>" in render_doc(template_env(), "learn", docs=tmp_path)
    doc.write_text("# Second\n")
    # a new version even on coarse clocks
    os.utime(doc, ns=(doc.stat().st_atime_ns, doc.stat().st_mtime_ns + 1_000_000))
    assert "<h1 id=\"second\">Second</h1>" in render_doc(template_env(), "learn", docs=tmp_path)


def test_heading_anchors_follow_github():
    from server.docs_pages import github_slug

    assert github_slug("3. WebAssembly builds (issue 4), CPU box") == "3-webassembly-builds-issue-4-cpu-box"
    assert github_slug("The `.tinygpt` file, version 2") == "the-tinygpt-file-version-2"


@pytest.mark.parametrize("path", sorted((ROOT / "docs/bench").glob("*.json")), ids=lambda p: p.name)
def test_bench_chart_draws_one_line_per_backend(path):
    from server.bench_chart import bench_svg, chart_series, load_bench

    data = load_bench(path)
    svg = ET.fromstring(bench_svg(data))
    ns = {"s": "http://www.w3.org/2000/svg"}
    lines = svg.findall("s:polyline[@class='series']", ns)
    labels = [t.text for t in svg.findall("s:text[@class='series-label']", ns)]
    title = svg.find("s:title", ns).text
    print(f"\n{path.name}: {title!r}; {len(lines)} lines {[line.get('data-series') for line in lines]}")
    assert [line.get("data-series") for line in lines] == labels == [s["backend"] for s in chart_series(data)]
    assert data["device"] in title
    for line, s in zip(lines, chart_series(data)):
        assert len(line.get("points").split()) == len(s["ms_per_step"])


def test_bench_chart_of_many_series_draws_the_best_of_each_family():
    from server.bench_chart import chart_series

    series = [{"backend": f"WASM {b}", "family": "WASM", "ms_per_step": {"tiny": t, "small": s}}
              for b, t, s in (("scalar", 40.0, 350.0), ("simd", 10.0, 90.0), ("relaxed", 8.0, 48.0))]
    series += [{"backend": f"PyTorch {n}", "family": "PyTorch", "ms_per_step": {"tiny": 6.0 + n}} for n in range(5)]
    series += [{"backend": "C++ native", "ms_per_step": {"tiny": 5.0, "small": 23.0}}]  # no family: its own line
    lines = chart_series({"presets": ["tiny", "small"], "series": series})
    print(f"\n{len(series)} series -> {lines}")
    assert lines == [{"backend": "WASM (best)", "ms_per_step": {"tiny": 8.0, "small": 48.0}},
                     {"backend": "PyTorch (best)", "ms_per_step": {"tiny": 6.0}}, series[-1]]
    assert chart_series({"presets": ["tiny"], "series": series[:8]}) == series[:8]  # 8 fit: drawn as they are


def test_bench_labels_stay_apart_and_inside():
    from server.bench_chart import spread_labels

    placed = spread_labels([100, 101, 102, 300, 395], gap=14, top=50, bottom=400)
    print(f"\nlabels at {placed}")
    assert all(b - a >= 14 for a, b in zip(sorted(placed), sorted(placed)[1:]))
    assert min(placed) >= 50 and max(placed) <= 400 and placed[3] == 300


def test_bench_file_errors_name_the_file(tmp_path):
    from server.bench_chart import load_bench

    bad = tmp_path / "bad.json"
    good = json.loads((ROOT / "docs/bench/gpu-h200-2026-11-22.json").read_text())
    bad.write_text(json.dumps({k: v for k, v in good.items() if k != "device"}))
    with pytest.raises(ValueError, match="bad.json: no 'device' key"):
        load_bench(bad)
    good["series"][0]["ms_per_step"]["giant"] = 1.0
    bad.write_text(json.dumps(good))
    with pytest.raises(ValueError, match=r"bad.json: series .* has presets \['giant'\] not in 'presets'"):
        load_bench(bad)


def test_bench_file_of_too_many_lines_is_refused(tmp_path):
    from server.bench_chart import load_bench

    data = json.loads((ROOT / "docs/bench/gpu-h200-2026-11-22.json").read_text())
    data["series"] = [dict(data["series"][0], backend=f"line {i}") for i in range(9)]
    bad = tmp_path / "nine.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"nine.json: 9 series in 9 families, at most 8"):
        load_bench(bad)


def docs_with_a_plot(tmp_path):
    """A copy of docs/ whose performance page links a PNG of docs/bench, as `tinygpt bench --all` makes."""
    import shutil

    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    (docs / "bench" / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    with (docs / "performance.md").open("a") as f:
        f.write("\n![Step time per preset](bench/plot.png)\n")
    return docs


def test_a_plot_of_docs_bench_is_an_image_of_the_page(tmp_path):
    from server.app import template_env
    from server.docs_pages import render_doc

    docs = docs_with_a_plot(tmp_path)
    html = render_doc(template_env(), "performance", docs=docs)
    assert '<img src="bench/plot.png" alt="Step time per preset"' in html
    (docs / "bench" / "plot.png").unlink()
    with pytest.raises(FileNotFoundError, match="no plot.png"):  # a missing plot fails, never a broken image
        render_doc(template_env(), "performance", docs=docs)


def test_plots_are_served_as_png_and_nothing_else_of_docs_bench(tmp_path):
    docs = docs_with_a_plot(tmp_path)
    app = f"from server.app import create_app; import uvicorn; uvicorn.run(create_app(docs=__import__('pathlib')" \
          f".Path({str(docs)!r})), host='127.0.0.1', port={{port}}, log_level='warning')"
    with running_server([sys.executable, "-c", app]) as url:
        status, headers, body = fetch(url + "/bench/plot.png")
        print(f"\n/bench/plot.png: {status} {headers['Content-Type']} {len(body)} bytes")
        assert status == 200 and headers["Content-Type"] == "image/png" and body.startswith(b"\x89PNG")
        assert headers["Cross-Origin-Embedder-Policy"] == "require-corp"
        for other in ("/bench/README.md", "/bench/gpu-h200-2026-11-22.json", "/bench/none.png"):
            assert fetch(url + other)[0] == 404, other


def test_build_copies_the_plots_where_the_pages_link_them(tmp_path):
    from server.cli import write_docs_pages

    docs = docs_with_a_plot(tmp_path)
    out = tmp_path / "dist"
    out.mkdir()
    write_docs_pages(out, docs)
    assert (out / "bench" / "plot.png").read_bytes() == (docs / "bench" / "plot.png").read_bytes()
    assert '<img src="bench/plot.png"' in (out / "performance.html").read_text()  # /performance -> /bench/plot.png


def test_performance_page_has_a_chart_per_marker(server_url):
    from server.docs_pages import CHART_MARKER

    markers = CHART_MARKER.findall((ROOT / "docs/performance.md").read_text())
    _, _, body = fetch(server_url + "/performance")
    html = body.decode()
    charts = html.count('<svg class="bench-chart"')
    print(f"\nmarkers {markers}; charts {charts}")
    assert markers and charts == len(markers)
    assert "bench-chart:" not in html


@pytest.mark.parametrize("path", ["/no-such-page", "/static/no-such-file.js", "/learn/extra"])
def test_missing_path_is_the_styled_404_with_the_headers(server_url, path):
    status, headers, body = fetch(server_url + path)
    html = body.decode()
    print(f"\n{path}: {status} {headers['Content-Type']}")
    assert status == 404 and headers["Content-Type"].startswith("text/html")
    assert_global_headers(headers)
    assert "Nothing here" in html and f'<code id="missing-path">{path}</code>' in html
    assert 'href="/static/css/docs.css"' in html  # absolute: the 404 is served at any depth


def test_favicon_is_served(server_url):
    for path in ("/favicon.ico", "/static/favicon.svg"):
        status, headers, body = fetch(server_url + path)
        print(f"\n{path}: {status} {headers['Content-Type']} {len(body)} bytes")
        assert status == 200 and headers["Content-Type"].startswith("image/svg+xml") and body.startswith(b"<svg")
        assert_global_headers(headers)


@pytest.mark.parametrize("path", ["/", "/learn", "/static/js/app.js", "/static/presets.json",
                                  "/static/data/tinyshakespeare.txt", "/webgpu/trainer.js"])
def test_text_is_gzipped_with_the_headers(server_url, path):
    _, plain_headers, plain = fetch(server_url + path)
    status, headers, body = fetch(server_url + path, {"Accept-Encoding": "gzip"})
    print(f"\n{path}: {len(plain):,} bytes, gzipped {len(body):,} ({len(plain) / len(body):.2f}x)")
    assert status == 200 and headers["Content-Encoding"] == "gzip" and "Accept-Encoding" in headers["Vary"]
    assert "Content-Encoding" not in plain_headers  # a client that does not ask gets the bytes as they are
    assert gzip.decompress(body) == plain
    assert_global_headers(headers)


@pytest.mark.parametrize("path", ["/static/js/app.js", "/static/data/tinyshakespeare.txt", "/webgpu/trainer.js"])
def test_static_files_revalidate_with_304(server_url, path):
    status, headers, _ = fetch(server_url + path, {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Cache-Control"] == "no-cache"
    etag, modified = headers["ETag"], headers["Last-Modified"]
    for condition in ({"If-None-Match": etag}, {"If-Modified-Since": modified}):
        status, headers, body = fetch(server_url + path, {"Accept-Encoding": "gzip", **condition})
        print(f"\n{path} {condition}: {status}, {len(body)} bytes")
        assert status == 304 and body == b""
        assert_global_headers(headers)
    status, _, _ = fetch(server_url + path, {"If-None-Match": '"an-older-version"'})
    assert status == 200


def test_a_byte_range_is_of_the_file_as_on_disk(server_url):
    path = "/static/data/tinyshakespeare.txt"
    status, headers, body = fetch(server_url + path, {"Accept-Encoding": "gzip", "Range": "bytes=0-99"})
    print(f"\n{path} bytes 0-99: {status}, {len(body)} bytes, encoding {headers['Content-Encoding']}")
    assert status == 206 and body == (ROOT / "site" / path.lstrip("/")).read_bytes()[:100]
    assert headers["Content-Encoding"] is None
    assert_global_headers(headers)


def test_load_check_counts_requests_and_errors(server_url):
    from bench.server.load_check import check_path

    ok = check_path(server_url, "/static/js/app.js", seconds=0.5, threads=2, gzip=True)
    missing = check_path(server_url, "/static/no-such-file.js", seconds=0.3, threads=1, gzip=True)
    print(f"\n{ok}\n{missing}")
    assert ok["requests"] > 0 and ok["errors"] == 0
    assert missing["requests"] > 0 and missing["errors"] == missing["requests"]


def test_build_writes_the_docs_pages_and_404(tmp_path):
    from server.docs_pages import PAGES

    out = tmp_path / "dist"
    r = run_build(out)
    assert r.returncode == 0, r.stderr
    written = sorted(p.name for p in out.glob("*.html"))
    print(f"\ndist/*.html: {written}")
    assert written == sorted(["index.html", "404.html", *(f"{name}.html" for name in PAGES)])
    learn = (out / "learn.html").read_text()
    assert '<a href="format">' in learn and 'href="static/css/docs.css"' in learn  # relative, as at /learn
    assert "<svg class=\"bench-chart\"" in (out / "performance.html").read_text()
    not_found = (out / "404.html").read_text()
    assert "Nothing here" in not_found and 'href="/static/css/docs.css"' in not_found
    assert (out / "static/favicon.svg").exists() and (out / "static/css/docs.css").exists()
    assert "Cache-Control: no-cache" in (out / "_headers").read_text()
