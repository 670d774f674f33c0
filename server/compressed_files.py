"""StaticFiles that send a gzipped copy of a compressible file to a client that accepts gzip, the
copy made once per version of the file and kept in memory. Compressing per request, as Starlette's
GZipMiddleware does, costs ~90 ms of CPU for the 1.1 MB corpus every time it is fetched; the
whole of site/ compressed is a few MB. Accept-Encoding is negotiated by server/encoding.py. The
gzipped copy has an ETag of its own (the file's with `-gzip`), so a cache never revalidates one
encoding with the other's validator, and `Vary: Accept-Encoding` goes on 200s and 304s alike."""
from __future__ import annotations

import gzip
import os
import threading

from starlette.datastructures import Headers
from starlette.responses import FileResponse, Response
from starlette.staticfiles import NotModifiedResponse, StaticFiles

from server.encoding import GZIP, chosen_encoding

# Types worth compressing (text, and WebAssembly: 2.3x smaller); images other than SVG and any
# already-compressed format are sent as they are.
COMPRESSIBLE = ("text/", "application/javascript", "application/json", "application/wasm", "image/svg+xml")
MIN_SIZE = 1024  # below this, the gzip header and a round of inflate cost more than they save
LEVEL = 6  # the size of level 9 within 0.3% for 3/4 of the CPU time (corpus: 90 vs 119 ms, once)


class GzipCache:
    """path → (mtime_ns, size, gzipped bytes): one entry per file, replaced when the file changes."""

    def __init__(self):
        self.entries: dict[str, tuple[int, int, bytes]] = {}
        self.lock = threading.Lock()

    def get(self, path: str, stat_result: os.stat_result) -> bytes:
        version = (stat_result.st_mtime_ns, stat_result.st_size)
        with self.lock:
            entry = self.entries.get(path)
        if entry is None or entry[:2] != version:
            with open(path, "rb") as f:
                entry = (*version, gzip.compress(f.read(), LEVEL, mtime=0))
            with self.lock:
                self.entries[path] = entry
        return entry[2]


class CompressedStaticFiles(StaticFiles):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gzipped = GzipCache()

    def file_response(self, full_path, stat_result, scope, status_code: int = 200) -> Response:
        request = Headers(scope=scope)
        response = FileResponse(full_path, status_code=status_code, stat_result=stat_result)
        media_type = response.headers.get("content-type", "")
        negotiated = (status_code == 200 and stat_result.st_size >= MIN_SIZE and media_type.startswith(COMPRESSIBLE))
        gzipped = negotiated and "range" not in request and chosen_encoding(request.get("accept-encoding")) == GZIP
        if negotiated:  # on 200 and 304 alike: a cache must key this URL's copies by encoding
            response.headers["vary"] = "Accept-Encoding"
        if gzipped:  # a different representation, so a different strong validator (RFC 9110 §8.8.3.3)
            response.headers["etag"] = response.headers["etag"][:-1] + '-gzip"'
        if self.is_not_modified(response.headers, request):
            return NotModifiedResponse(response.headers)
        if not gzipped:
            return response
        headers = {k: v for k, v in response.headers.items() if k not in ("content-length", "accept-ranges")}
        headers["content-encoding"] = GZIP
        return Response(self.gzipped.get(str(full_path), stat_result), headers=headers)
