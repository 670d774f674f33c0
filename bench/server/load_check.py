"""A bounded load check of a running playground server: for each path, `--threads` clients, each on
its own keep-alive connection, send requests for `--seconds`, and the check prints requests/s,
errors (anything but a 200 with the whole body, or a failed connection), latency and bytes.

    python -m bench.server.load_check --url http://127.0.0.1:8000 [--seconds 5] [--threads 4] [--identity]

Clients ask for gzip as browsers do (`--identity`: they do not). A benchmark, not a test: the
clients share the machine's cores with the server, so figures are for comparing runs on one machine."""
from __future__ import annotations

import argparse
import http.client
import statistics
import threading
import time
from urllib.parse import urlsplit

DEFAULT_PATHS = ("/", "/static/js/app.js", "/static/data/tinyshakespeare.txt", "/learn", "/format", "/performance")


def client(host: str, port: int, path: str, headers: dict, until: float, out: list) -> None:
    """Requests `path` until `until` (monotonic); appends (ok, seconds, body bytes) per request."""
    conn = None
    while time.monotonic() < until:
        t0 = time.perf_counter()
        try:
            conn = conn or http.client.HTTPConnection(host, port, timeout=10)
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            body = r.read()
            out.append((r.status == 200 and body != b"", time.perf_counter() - t0, len(body)))
        except (OSError, http.client.HTTPException):
            out.append((False, time.perf_counter() - t0, 0))
            conn = None  # a broken connection: the next request opens a new one


def check_path(url: str, path: str, seconds: float, threads: int, gzip: bool) -> dict:
    parts = urlsplit(url)
    headers = {"Accept-Encoding": "gzip"} if gzip else {}
    results: list[tuple[bool, float, int]] = []  # list.append is atomic: the threads share one list
    until = time.monotonic() + seconds
    workers = [threading.Thread(target=client, args=(parts.hostname, parts.port, path, headers, until, results))
               for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    times = sorted(t for _, t, _ in results)
    return {"path": path, "requests": len(results), "per_s": len(results) / seconds,
            "errors": sum(not ok for ok, _, _ in results), "median_ms": statistics.median(times) * 1000,
            "p95_ms": times[int(0.95 * (len(times) - 1))] * 1000,
            "kB_per_response": statistics.mean(n for _, _, n in results) / 1000}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--seconds", type=float, default=5.0, help="per path")
    ap.add_argument("--threads", type=int, default=4, help="concurrent clients")
    ap.add_argument("--identity", action="store_true", help="do not ask for gzip")
    ap.add_argument("paths", nargs="*", default=DEFAULT_PATHS)
    args = ap.parse_args()
    print(f"{args.url}: {args.threads} keep-alive clients, {args.seconds:g} s per path, "
          f"{'identity' if args.identity else 'gzip accepted'}")
    print(f"{'path':<36} {'requests':>8} {'req/s':>8} {'errors':>6} {'median ms':>9} {'p95 ms':>8} {'kB/resp':>8}")
    failed = 0
    for path in args.paths:
        r = check_path(args.url, path, args.seconds, args.threads, not args.identity)
        failed += r["errors"]
        print(f"{r['path']:<36} {r['requests']:>8} {r['per_s']:>8.1f} {r['errors']:>6} {r['median_ms']:>9.1f} "
              f"{r['p95_ms']:>8.1f} {r['kB_per_response']:>8.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
