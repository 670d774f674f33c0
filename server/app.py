"""The Starlette app: `/` renders site/templates/index.html, `/static` serves site/static, `/webgpu`
serves the WebGPU trainer's runtime files (and nothing else of webgpu/), and every response carries
the headers of `_headers` (cross-origin isolation for WebAssembly threads)."""
from __future__ import annotations

import json
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from server.headers import ROOT, global_headers

SITE = ROOT / "site"
WEBGPU = ROOT / "webgpu"
# What the page's worker imports of webgpu/ (trainer.js and its imports): served at /webgpu/ and
# copied into dist/webgpu/. The rest of webgpu/ (node_modules, tools, bench, package files) is
# for Node and tests, never for the page.
WEBGPU_RUNTIME = ("trainer.js", "prng.js", "ops.js", "plan.js", "kernels")


def webgpu_runtime_files(webgpu: Path = WEBGPU) -> list[str]:
    """Paths, relative to webgpu/, of every file of WEBGPU_RUNTIME (a folder: its .js files)."""
    files = []
    for name in WEBGPU_RUNTIME:
        path = webgpu / name
        found = sorted(path.rglob("*.js")) if path.is_dir() else [path]
        files += [p.relative_to(webgpu).as_posix() for p in found]
    return files


class RuntimeFiles(StaticFiles):
    """StaticFiles limited to a list of files; anything else is a 404 (listed per request, so a
    new kernel file shows without a restart)."""

    def __init__(self, directory: Path, list_files):
        super().__init__(directory=directory)
        self.list_files = list_files

    async def get_response(self, path: str, scope):
        if Path(path).as_posix() not in self.list_files():
            raise HTTPException(status_code=404)
        return await super().get_response(path, scope)


def template_env(site: Path = SITE) -> Environment:
    return Environment(loader=FileSystemLoader(site / "templates"), autoescape=select_autoescape())


def render_index(site: Path = SITE) -> str:
    """The page, rendered with the presets that every level reads (site/static/presets.json)."""
    presets = json.loads((site / "static" / "presets.json").read_text())
    return template_env(site).get_template("index.html").render(presets=presets)


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
                message["headers"] = kept + self.raw
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(site: Path = SITE) -> WithHeaders:
    # Rendered per request: a dev server should show template edits without a restart.
    async def index(request):
        return HTMLResponse(render_index(site))

    app = Starlette(routes=[
        Route("/", index),
        Mount("/static", StaticFiles(directory=site / "static"), name="static"),
        Mount("/webgpu", RuntimeFiles(WEBGPU, webgpu_runtime_files), name="webgpu"),
    ])
    return WithHeaders(app, global_headers())
