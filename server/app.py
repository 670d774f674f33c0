"""The Starlette app: `/` renders site/templates/index.html, `/static` serves site/static, and every
response carries the headers of `_headers` (cross-origin isolation for WebAssembly threads)."""
from __future__ import annotations

import json
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from server.headers import ROOT, global_headers

SITE = ROOT / "site"


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
    ])
    return WithHeaders(app, global_headers())
