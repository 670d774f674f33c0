"""The response headers of the playground, read from the repository's `_headers` file so that the dev
server, the static dist/ and any static host send the same ones."""
from __future__ import annotations

import mimetypes
import re
from pathlib import Path

from python_ref.resources import ROOT  # the checkout, or the installed copy of its shared files

HEADERS_FILE = ROOT / "_headers"

# Some systems' mime tables lack these, and a browser refuses a module or a streamed WebAssembly
# compile served with the wrong type.
mimetypes.add_type("text/javascript", ".mjs")
mimetypes.add_type("text/javascript", ".js")
mimetypes.add_type("application/wasm", ".wasm")


def global_headers(path: Path = HEADERS_FILE) -> dict[str, str]:
    """The headers of the `/*` rule: `Name: value` lines indented under it; `#` lines are comments."""
    headers: dict[str, str] = {}
    in_rule = False
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            in_rule = line.strip() == "/*"
            continue
        if in_rule:
            name, sep, value = line.strip().partition(":")
            if not sep:
                raise ValueError(f"{path}: expected 'Name: value', got {line.strip()!r}")
            headers[name.strip()] = value.strip()
    if not headers:
        raise ValueError(f"{path}: no headers under a '/*' rule")
    return headers


def with_connect_sources(headers: dict[str, str], origins: list[str]) -> dict[str, str]:
    """The headers with `origins` added to the Content-Security-Policy's connect-src (each must be an
    origin: scheme://host[:port], nothing after it)."""
    if not origins:
        return headers
    for origin in origins:
        if not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?", origin):
            raise ValueError(f"--connect-src takes an origin such as https://host:8080, got {origin!r}")
    policy = [d.strip() for d in headers["Content-Security-Policy"].split(";")]
    policy = [f"{d} {' '.join(origins)}" if d.split()[0] == "connect-src" else d for d in policy if d]
    return dict(headers, **{"Content-Security-Policy": "; ".join(policy)})
