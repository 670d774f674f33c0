"""A local stand-in for the Hugging Face datasets-server `/rows` API, so the page's real client code
(site/static/js/hf_rows.js) can be tested without the network: a real HTTP server process answering
`GET /rows?dataset=&config=&split=&offset=&length=` as the service does, with its CORS headers.

Datasets (config "default", split "train", column "text"):
  stand-in/stories       250 short rows
  stand-in/slow          the same rows, each page answered after SLOW_PAGE_S (for Cancel)
  stand-in/rate-limited  429 with the service's error body
  stand-in/broken        500
  stand-in/malformed     200 with a body that is not JSON
anything else            404 as for an unknown dataset
`GET /_requests` lists the requests seen ({dataset, offset, length, authorization}), for tests.

Run: `python tests/support/hf_rows_stand_in.py [--port N] [--tls]`; it prints `listening on <url>` when
ready. With --tls it serves HTTPS with a throw-away self-signed certificate for the real service's name,
so that a browser told to resolve that name to this port (and to accept the certificate) reaches it at
the official origin, https://datasets-server.huggingface.co. In tests: `with running_stand_in() as base:`.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

ROWS = 250
SLOW_PAGE_S = 1.0
MAX_LENGTH = 100
NOT_FOUND = ("The dataset does not exist, or is not accessible without authentication (private or gated). "
             "Please check the spelling of the dataset name or retry with authentication.")


def story(i: int) -> str:
    return f"Story {i}: a fox named Pip found {i} shiny stones by the river and counted them twice.\nThe end."


class Handler(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def log_message(self, *args):  # quiet: tests print what they measure
        pass

    def cors(self):
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Headers", "authorization, content-type")
        self.send_header("Access-Control-Allow-Methods", "GET, OPTIONS")

    def answer(self, status: int, body, content_type: str = "application/json"):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.cors()
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        try:
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the page cancelled this page of rows: what Cancel is for

    def do_OPTIONS(self):  # the preflight a request with Authorization makes
        self.send_response(204)
        self.cors()
        self.send_header("Access-Control-Max-Age", "600")
        self.end_headers()

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/_requests":
            return self.answer(200, Handler.seen)
        if url.path != "/rows":
            return self.answer(404, {"error": "Not Found"})
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        dataset = q.get("dataset", "")
        Handler.seen.append({"dataset": dataset, "offset": q.get("offset"), "length": q.get("length"),
                             "authorization": self.headers.get("Authorization")})
        try:
            offset, length = int(q.get("offset", 0)), int(q.get("length", MAX_LENGTH))
        except ValueError:
            return self.answer(422, {"error": "Parameters 'offset' and 'length' must be integers"})
        if length > MAX_LENGTH or offset < 0:
            return self.answer(422, {"error": f"Parameter 'length' must not be greater than {MAX_LENGTH}"})
        if dataset == "stand-in/rate-limited":
            return self.answer(429, {"error": "Rate limit reached: too many requests. Please retry later."})
        if dataset == "stand-in/broken":
            return self.answer(500, {"error": "Unexpected error."})
        if dataset == "stand-in/malformed":
            return self.answer(200, b'{"rows": [{"row_idx": 0, "row": {"text": "cut sh', "application/json")
        if (dataset not in ("stand-in/stories", "stand-in/slow") or q.get("config") != "default"
                or q.get("split") != "train"):
            return self.answer(404, {"error": NOT_FOUND})
        if dataset == "stand-in/slow":
            time.sleep(SLOW_PAGE_S)
        rows = [{"row_idx": i, "row": {"text": story(i), "id": i}, "truncated_cells": []}
                for i in range(offset, min(offset + length, ROWS))]
        self.answer(200, {"features": [{"feature_idx": 0, "name": "text",
                                        "type": {"dtype": "string", "_type": "Value"}},
                                       {"feature_idx": 1, "name": "id",
                                        "type": {"dtype": "int64", "_type": "Value"}}],
                          "rows": rows, "num_rows_total": ROWS, "num_rows_per_page": MAX_LENGTH, "partial": False})


def stories_bytes(max_bytes: int) -> bytes:
    """What the page should make of stand-in/stories: rows joined by blank lines, cut at max_bytes."""
    return "".join(story(i) + "\n\n" for i in range(ROWS)).encode()[:max_bytes]


@contextlib.contextmanager
def running_stand_in(tls: bool = False):
    """Starts the stand-in as its own process on a free port; yields its base URL (https with tls)."""
    proc = subprocess.Popen([sys.executable, __file__, "--port", "0", *(["--tls"] if tls else [])],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"the datasets-server stand-in did not start: {line!r}")
        yield line.split()[-1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


OFFICIAL_HOST = "datasets-server.huggingface.co"


def tls_context(folder: Path) -> ssl.SSLContext:
    """A server context with a self-signed certificate for OFFICIAL_HOST, made by openssl in `folder`."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    f"/CN={OFFICIAL_HOST}", "-addext", f"subjectAltName=DNS:{OFFICIAL_HOST}",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls", action="store_true", help="serve HTTPS as " + OFFICIAL_HOST)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    if args.tls:
        with tempfile.TemporaryDirectory() as folder:
            server.socket = tls_context(Path(folder)).wrap_socket(server.socket, server_side=True)
    scheme = "https" if args.tls else "http"
    print(f"listening on {scheme}://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
