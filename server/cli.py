"""`tinygpt serve [--host H] [--port P]` runs the playground; `tinygpt build [--out DIR]` writes it
as static files (index.html, the docs pages and their bench/*.png plots,
404.html, static/, webgpu/, _headers) for any static host."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from python_ref.config import ConfigError
from python_ref.resources import default_dist
from server.http_protocol import HEADER_TIMEOUT_S, KEEP_ALIVE_S, TimedH11Protocol
from server.headers import HEADERS_FILE, ROOT

# wasm/builds.json: the one list of WebAssembly builds (build_wasm.sh makes them, the page loads them).
REQUIRED_BUILDS = tuple(b["name"] for b in json.loads((ROOT / "wasm" / "builds.json").read_text())["builds"])


def missing_builds(site: Path) -> list[str]:
    """The WebAssembly builds that `make build` has not copied into site/static/wasm yet."""
    return [b for b in REQUIRED_BUILDS if not (site / "static" / "wasm" / b / "tinygpt.wasm").exists()]


def unsafe_target(out: Path, site: Path) -> str | None:
    """Why replacing `out` with a fresh dist/ could destroy work, or None if it cannot."""
    if out == ROOT or out in ROOT.parents:
        return "it holds the repository"
    if out == site or site in out.parents:
        return "it is inside site/, which the build copies from"
    if out.exists() and any(out.iterdir()) and not (out / "_headers").exists():
        return "it is not empty and is not an earlier build (no _headers file in it)"
    return None


def write_docs_pages(out: Path, docs: Path | None = None) -> None:
    """The docs pages as <name>.html, which Netlify and Cloudflare Pages serve at /<name> (so the pages'
    relative links resolve as on the dev server), the lab notebook as lab/index.html (served at /lab/) and
    lab/<name>.html, their plots as bench/*.png, and 404.html, which they serve for a missing path."""
    from server.app import SITE, render_not_found, template_env
    from server.docs_pages import DOCS, LAB, LAB_INDEX, PAGES, bench_images, lab_names, render_doc

    docs = docs or DOCS
    for name in PAGES:
        (out / f"{name}.html").write_text(render_doc(template_env(SITE), name, docs))
    (out / LAB).mkdir(exist_ok=True)
    (out / LAB / "index.html").write_text(render_doc(template_env(SITE), f"{LAB}/{LAB_INDEX}", docs))
    for name in lab_names(docs):
        (out / LAB / f"{name}.html").write_text(render_doc(template_env(SITE), f"{LAB}/{name}", docs))
    (out / "404.html").write_text(render_not_found(SITE))
    for image in bench_images(docs):  # where the pages' relative links (bench/FILE.png, ../bench/FILE.png) point
        (out / "bench").mkdir(exist_ok=True)
        shutil.copyfile(docs / "bench" / image, out / "bench" / image)


def serve(args) -> int:
    import uvicorn

    from server.app import SITE, create_app

    if missing := missing_builds(SITE):
        print(f"warning: no WebAssembly build {', '.join(missing)} in site/static/wasm: run `make build` "
              "first; the page will say it cannot load them", file=sys.stderr)
    for name in ("header_timeout", "keep_alive"):
        if not getattr(args, name) > 0:
            option = "--" + name.replace("_", "-")
            raise ConfigError(f"{option} must be a positive number of seconds, got {getattr(args, name)}")
    TimedH11Protocol.header_timeout = args.header_timeout
    try:
        app = create_app(connect_src=args.connect_src)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    print(f"TinyGPT playground: http://{args.host}:{args.port}/", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", http=TimedH11Protocol,
                timeout_keep_alive=args.keep_alive)
    return 0


def build(args) -> int:
    from server.app import SITE, WEBGPU, render_index, webgpu_runtime_files

    if missing := missing_builds(SITE):
        print(f"error: no WebAssembly build {', '.join(missing)} in site/static/wasm: run `make build` first",
              file=sys.stderr)
        return 1
    out = Path(args.out).resolve()
    if problem := unsafe_target(out, SITE):
        print(f"error: refusing to replace {out}: {problem}", file=sys.stderr)
        return 1
    # Written beside the target and swapped in, so a failed build never leaves half a dist/.
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(SITE / "static", tmp / "static")
    for rel in webgpu_runtime_files():  # where the worker imports it: /webgpu/trainer.js
        (tmp / "webgpu" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(WEBGPU / rel, tmp / "webgpu" / rel)
    (tmp / "index.html").write_text(render_index(SITE))
    write_docs_pages(tmp)
    shutil.copyfile(HEADERS_FILE, tmp / "_headers")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"wrote {out}")
    return 0


def register(sub) -> None:
    """Adds `serve` and `build` to the subparsers of `tinygpt` (the `tinygpt.commands` entry points)."""
    s = sub.add_parser("serve", help="run the playground (the page, its WebAssembly builds, the WebGPU trainer)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--header-timeout", type=float, default=HEADER_TIMEOUT_S, metavar="S",
                   help="close a connection that has not sent a whole request head within S seconds "
                   "(default %(default)s)")
    s.add_argument("--keep-alive", type=float, default=KEEP_ALIVE_S, metavar="S",
                   help="close an idle kept-alive connection after S seconds (default %(default)s)")
    s.add_argument("--connect-src", action="append", default=[], metavar="ORIGIN",
                   help="also let the page fetch from ORIGIN (a self-hosted datasets-server); repeatable")
    s.set_defaults(func=serve)
    b = sub.add_parser("build", help="write the playground as static files for any static host")
    b.add_argument("--out", default=str(default_dist()), help="the folder to (re)write (default: %(default)s)")
    b.set_defaults(func=build)
