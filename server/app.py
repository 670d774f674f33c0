"""The Starlette app: `/` renders site/templates/index.html, `/learn`, `/format`, … render docs/*.md
(server/docs_pages.py) and `/bench` serves their PNG plots, `/static` serves site/static, `/webgpu`
serves the WebGPU trainer's runtime files (and nothing else of webgpu/), a missing path gets the
styled 404 page, text is gzipped, and every response carries the headers of `_headers`
(cross-origin isolation for WebAssembly threads, Cache-Control)."""
from __future__ import annotations

import functools
import json
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.gzip import GZipMiddleware
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse
from starlette.routing import Mount, Route

from server.compressed_files import CompressedStaticFiles
from server.encoding import NegotiatedEncoding
from server.docs_pages import DOCS, LAB, LAB_INDEX, PAGES, bench_images, lab_names, render_doc
from server.headers import ROOT, global_headers, with_connect_sources

SITE = ROOT / "site"
WEBGPU = ROOT / "webgpu"
# What the page's worker imports of webgpu/ (trainer.js, decoder.js and their imports, inspect.js for
# the attention view, training_stats.js for the training view): served at /webgpu/ and copied into
# dist/webgpu/. The rest of webgpu/ (node_modules, tools, bench, package files) is for Node and tests,
# never for the page.
WEBGPU_RUNTIME = ("trainer.js", "decoder.js", "buffers.js", "prng.js", "manifest.js", "config_rules.js", "ops.js",
                  "plan.js", "software_adapter.js", "subgroups.js", "inspect.js", "lora.js", "training_stats.js",
                  "step_shapes.js", "kernels")


def webgpu_runtime_files(webgpu: Path = WEBGPU) -> list[str]:
    """Paths, relative to webgpu/, of every file of WEBGPU_RUNTIME (a folder: its .js files)."""
    files = []
    for name in WEBGPU_RUNTIME:
        path = webgpu / name
        found = sorted(path.rglob("*.js")) if path.is_dir() else [path]
        files += [p.relative_to(webgpu).as_posix() for p in found]
    return files


class RuntimeFiles(CompressedStaticFiles):
    """StaticFiles limited to a list of files; anything else is a 404 (listed per request, so a
    new kernel file shows without a restart)."""

    def __init__(self, directory: Path, list_files):
        super().__init__(directory=directory)
        self.list_files = list_files

    async def get_response(self, path: str, scope):
        if Path(path).as_posix() not in self.list_files():
            raise HTTPException(status_code=404)
        return await super().get_response(path, scope)


# One environment per site: it compiles each template once and recompiles it when its file changes
# (jinja2's auto_reload), so edits still show without a restart.
@functools.lru_cache(maxsize=None)
def template_env(site: Path = SITE) -> Environment:
    return Environment(loader=FileSystemLoader(site / "templates"), autoescape=select_autoescape())


def render_index(site: Path = SITE) -> str:
    """The page, rendered with the presets that every level reads (site/static/presets.json)."""
    presets = json.loads((site / "static" / "presets.json").read_text())
    return template_env(site).get_template("index.html").render(presets=presets)


def render_not_found(site: Path = SITE, path: str | None = None) -> str:
    """The 404 page; `path` is None in the static build, where the host serves it for any missing path."""
    return template_env(site).get_template("404.html").render(title="Not found", pages=PAGES, current=None,
                                                             root="/", path=path)


def one_vary(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The Vary headers of a response merged into one, each field named once (the static files and
    the gzip middleware may both have named Accept-Encoding)."""
    fields: list[bytes] = []
    for name, value in headers:
        if name.lower() == b"vary":
            for field in (v.strip() for v in value.split(b",")):
                if field and field.lower() not in (f.lower() for f in fields):
                    fields.append(field)
    rest = [h for h in headers if h[0].lower() != b"vary"]
    return rest + [(b"vary", b", ".join(fields))] if fields else rest


class WithHeaders:
    """ASGI middleware: adds fixed headers to every HTTP response (pages, static files, errors)."""

    def __init__(self, app, headers: dict[str, str]):
        self.app = app
        self.raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self.names = {k for k, _ in self.raw}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                kept = [h for h in message.get("headers", []) if h[0].lower() not in self.names]
                message["headers"] = one_vary(kept) + self.raw
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(site: Path = SITE, docs: Path = DOCS, connect_src: list[str] = ()) -> WithHeaders:
    # Rendered per request (a docs page's Markdown kept until its file changes): a dev server should
    # show template and docs edits without a restart.
    async def index(request):
        return HTMLResponse(render_index(site))

    async def doc(request):
        return HTMLResponse(render_doc(template_env(site), request.url.path.strip("/"), docs))

    # The lab notebook: its index (docs/lab/README.md) at /lab/, each investigation at /lab/<name>. /lab
    # redirects to /lab/ (a path, as not_found's redirects), where the index's relative links resolve.
    async def lab(request):
        name = request.path_params.get("name", LAB_INDEX)
        if name != LAB_INDEX and name not in lab_names(docs):
            raise HTTPException(status_code=404)
        return HTMLResponse(render_doc(template_env(site), f"{LAB}/{name}", docs))

    async def lab_folder(request):
        return RedirectResponse(f"/{LAB}/", status_code=308)

    # Browsers and tools still ask for /favicon.ico when a page has no icon link (or before reading it).
    async def favicon(request):
        return FileResponse(site / "static" / "favicon.svg", media_type="image/svg+xml")

    async def not_found(request, exc):
        path = request.url.path
        # /learn/ → /learn: a path, never an absolute URL built from the Host header (which a client
        # chooses). Leading slashes collapse, so //host/ cannot become a protocol-relative //host.
        bare = "/" + path.strip("/")
        if path.endswith("/") and bare != "/" and bare in page_paths:
            return RedirectResponse(bare, status_code=308)
        return HTMLResponse(render_not_found(site, path), status_code=404)

    app = Starlette(routes=[
        Route("/", index),
        *(Route(f"/{name}", doc) for name in PAGES),
        Route(f"/{LAB}", lab_folder),
        Route(f"/{LAB}/", lab),
        Route(f"/{LAB}/{{name}}", lab),
        Route("/favicon.ico", favicon),
        Mount("/static", CompressedStaticFiles(directory=site / "static"), name="static"),
        Mount("/webgpu", RuntimeFiles(WEBGPU, webgpu_runtime_files), name="webgpu"),
        # the docs pages' PNG plots, where their relative links (bench/FILE.png) point from /performance
        Mount("/bench", RuntimeFiles(docs / "bench", functools.partial(bench_images, docs)), name="bench"),
    ], exception_handlers={404: not_found})
    app.router.redirect_slashes = False  # Starlette's redirect names the Host header's host: not_found redirects
    page_paths = {route.path for route in app.routes if isinstance(route, Route)}
    # Files come gzipped from CompressedStaticFiles (compressed once per version); this gzips the
    # rendered pages, 404s included, and passes those files through. Outside it, WithHeaders adds
    # the `_headers` headers to every response, gzipped or 304.
    # NegotiatedEncoding parses Accept-Encoding once (server/encoding.py) for everything inside it.
    return WithHeaders(NegotiatedEncoding(GZipMiddleware(app, minimum_size=1024, compresslevel=6)),
                       with_connect_sources(global_headers(), list(connect_src)))
