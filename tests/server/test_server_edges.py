"""The server at its edges, against the real process on loopback: Accept-Encoding negotiated as RFC 9110
says (q-values, case, x-gzip, *), one ETag per encoding with Vary on 200 and 304, redirects that never
name the Host header, a malformed request logged in one line, slow and silent connections closed within
the header timeout while normal requests keep their latency, and non-positive timeouts refused."""
from __future__ import annotations

import http.client
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import pytest

from bench.hosts import free_port
from server.encoding import chosen_encoding
from support.server_process import running_server

FILE = "/static/presets.json"  # compressible and over the 1 KiB floor


@pytest.fixture(scope="module")
def server_url():
    with running_server() as url:
        yield url


def request(url: str, path: str, headers: dict[str, str] | None = None, method: str = "GET"):
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.headers, r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("header,expected", [
    ("gzip", "gzip"), ("GZIP", "gzip"), ("x-gzip", "gzip"), ("X-GZip;Q=1", "gzip"), ("*", "gzip"),
    ("br;q=1, gzip;q=0.5", "gzip"), ("deflate, gzip", "gzip"),
    ("gzip;q=0", "identity"), ("nogzip", "identity"), ("identity", "identity"), ("", "identity"),
    ("*;q=0", "identity"), ("*, gzip;q=0", "identity"), ("gzip;q=0.3, identity;q=0.8", "identity"),
    ("gzip;q=abc", "identity"), ("gzip;q=2", "identity"), (None, "identity"),
])
def test_accept_encoding_is_negotiated(server_url, header, expected):
    assert chosen_encoding(header) == expected
    status, headers, _ = request(server_url, FILE, {} if header is None else {"Accept-Encoding": header})
    got = headers.get("Content-Encoding") or "identity"
    print(f"\nAccept-Encoding {header!r}: {got}, ETag {headers['ETag']}, Vary {headers['Vary']}")
    assert status == 200 and got == expected
    assert headers.get_all("Vary") == ["Accept-Encoding"]


def test_each_encoding_has_its_own_etag_and_304s_vary(server_url):
    _, gz, _ = request(server_url, FILE, {"Accept-Encoding": "gzip"})
    _, plain, _ = request(server_url, FILE, {"Accept-Encoding": "identity"})
    print(f"\ngzip ETag {gz['ETag']}, identity ETag {plain['ETag']}")
    assert gz["ETag"] != plain["ETag"]
    for encoding, etag in (("gzip", gz["ETag"]), ("identity", plain["ETag"])):
        status, headers, body = request(server_url, FILE, {"Accept-Encoding": encoding, "If-None-Match": etag})
        print(f"{encoding} revalidated with its own ETag: {status}, Vary {headers.get('Vary')}")
        assert status == 304 and body == b"" and headers["Vary"] == "Accept-Encoding" and headers["ETag"] == etag
    # one encoding's validator never revalidates the other: the client gets the whole file
    status, headers, body = request(server_url, FILE, {"Accept-Encoding": "identity", "If-None-Match": gz["ETag"]})
    assert status == 200 and body and "Content-Encoding" not in headers


@pytest.mark.parametrize("path,location", [("/learn/", "/learn"), ("/format/", "/format"),
                                           ("//evil.example/", None), ("/nope/", None)])
def test_redirects_are_relative(server_url, path, location):
    status, headers, _ = request(server_url, path, {"Host": "evil.example"})
    print(f"\n{path} with Host evil.example: {status} Location {headers.get('Location')}")
    if location is None:
        assert status == 404 and "Location" not in headers
    else:
        assert status == 308 and headers["Location"] == location


def serve(*options: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "python_ref.cli", "serve", "--port", str(port), *options],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server did not start: {proc.stdout.read()}")


def stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        return proc.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0]


def test_a_malformed_request_logs_one_line():
    proc, port = serve()
    try:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\nhello\r\n0\r\n\r\n")
                answer = s.recv(4096)
            assert answer.startswith(b"HTTP/1.1 400 ")
        time.sleep(0.5)
    finally:
        log = stop(proc)
    lines = [ln for ln in log.splitlines() if ln.strip() and not ln.startswith("TinyGPT playground")]
    print(f"\nlog after 3 malformed chunked POSTs: {lines}")
    assert lines == ["WARNING:  Invalid HTTP request received."] * 3


def latency_ms(port: int, n: int = 40) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", FILE)
        conn.getresponse().read()
        conn.close()
        times.append(1e3 * (time.perf_counter() - t0))
    return times


def closed_after(sock: socket.socket, drip: bytes | None, limit: float) -> float | None:
    """Seconds until the server closed `sock` (None if still open at `limit`); with `drip`, one byte of it
    is sent every 0.25 s, as a slow-headers client does."""
    t0 = time.monotonic()
    sock.settimeout(0.25)
    i = 0
    while time.monotonic() - t0 < limit:
        try:
            if drip is not None and i < len(drip):
                sock.sendall(drip[i:i + 1])
                i += 1
            if sock.recv(1024) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def test_slow_and_silent_connections_are_closed_within_the_limit():
    limit = 2.0
    proc, port = serve("--header-timeout", str(limit), "--keep-alive", "1")
    try:
        before = latency_ms(port)
        slow_head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
        results: dict[str, list] = {"silent": [], "slow": [], "kept-alive": []}

        def hold(kind):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                if kind == "kept-alive":  # one whole request, then nothing
                    s.sendall(b"GET /static/presets.json HTTP/1.1\r\nHost: x\r\n\r\n")
                    s.settimeout(5)
                    s.recv(65536)
                results[kind].append(closed_after(s, slow_head if kind == "slow" else None, limit + 8))

        kinds = ["silent"] * 50 + ["slow"] * 50 + ["kept-alive"] * 10
        threads = [threading.Thread(target=hold, args=(k,)) for k in kinds]
        for t in threads:
            t.start()
        time.sleep(0.5)
        during = latency_ms(port)
        for t in threads:
            t.join()
    finally:
        stop(proc)
    for kind, closed in results.items():
        open_left = sum(c is None for c in closed)
        print(f"\n{kind}: {len(closed)} connections, closed after {min(c for c in closed if c):.2f}-"
              f"{max(c for c in closed if c):.2f} s, {open_left} still open" if open_left < len(closed) else
              f"\n{kind}: none closed")
        assert open_left == 0
        assert max(closed) <= (1.0 if kind == "kept-alive" else limit) + 1.5
    print(f"normal requests: median {statistics.median(before):.1f} ms before, {statistics.median(during):.1f} ms "
          f"with 110 idle or slow connections open (max {max(during):.1f} ms)")
    assert statistics.median(during) < max(50.0, 5 * statistics.median(before))


@pytest.mark.parametrize("option,value", [("--header-timeout", "0"), ("--keep-alive", "-5"),
                                          ("--header-timeout", "nan")])
def test_non_positive_timeouts_are_refused(option, value):
    r = subprocess.run([sys.executable, "-m", "python_ref.cli", "serve", "--port", "1", option, value],
                       capture_output=True, text=True, timeout=60)
    print(f"\nserve {option} {value}: exit {r.returncode}, {r.stderr.strip()!r}")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and option in r.stderr
