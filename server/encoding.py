"""Content negotiation of Accept-Encoding (RFC 9110 §12.5.3): which of gzip and identity a client takes.

A substring test ("gzip" in the header) sends gzip to `gzip;q=0` (refused) and `nogzip` (unknown), and
nothing to `GZIP` (codings are case-insensitive). Here the header is parsed: each coding with its q
weight, `x-gzip` the same as gzip (§8.4.1.3), `*` standing for any coding not named, identity acceptable
unless refused. The server sends gzip when it is acceptable and identity is not ranked above it by
name; otherwise identity (a server may send identity even where refused, rather than a 406).
"""
from __future__ import annotations

GZIP, IDENTITY = "gzip", "identity"


def _weight(param: str) -> float | None:
    """The q of one `;q=0.5` parameter (None for other parameters or a malformed value)."""
    name, _, value = param.partition("=")
    if name.strip().lower() != "q":
        return None
    try:
        q = float(value.strip())
    except ValueError:
        return 0.0  # a weight that cannot be read does not make a coding acceptable
    return q if 0.0 <= q <= 1.0 else 0.0


def coding_weights(header: str) -> dict[str, float]:
    """Each coding named in an Accept-Encoding value → its q (1 when not given), names lower-cased,
    x-gzip folded into gzip. A coding named twice keeps its highest weight."""
    weights: dict[str, float] = {}
    for item in header.split(","):
        coding, *params = item.split(";")
        coding = coding.strip().lower()
        if not coding:
            continue
        if coding == "x-gzip":
            coding = GZIP
        q = 1.0
        for p in params:
            if (w := _weight(p)) is not None:
                q = w
        weights[coding] = max(q, weights.get(coding, 0.0))
    return weights


def chosen_encoding(header: str | None) -> str:
    """gzip or identity for a request's Accept-Encoding (None: the header is absent, so identity)."""
    if header is None:
        return IDENTITY
    weights = coding_weights(header)
    star = weights.get("*")
    gzip_q = weights.get(GZIP, star if star is not None else 0.0)
    # identity has no weight of its own unless named: it is what is left when gzip is not acceptable,
    # or when the client ranks identity above gzip by name
    if gzip_q > 0 and gzip_q >= weights.get(IDENTITY, 0.0):
        return GZIP
    return IDENTITY


class NegotiatedEncoding:
    """ASGI middleware: rewrites a request's Accept-Encoding to the one coding chosen here, so that
    every layer inside (Starlette's GZipMiddleware, which tests for a substring, and the static
    files) sees either `gzip` or `identity`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = [(k, v) for k, v in scope["headers"] if k != b"accept-encoding"]
            given = [v for k, v in scope["headers"] if k == b"accept-encoding"]
            header = ", ".join(v.decode("latin-1") for v in given) if given else None
            headers.append((b"accept-encoding", chosen_encoding(header).encode()))
            scope = dict(scope, headers=headers)
        await self.app(scope, receive, send)
