"""Measures the playground's page load in headless Chromium: requests, bytes on the wire, and the time
from navigation until the page is ready and until the first training step (tiny, WebAssembly), with
a cold cache (a fresh browser context) and then warm (a reload in the same context).

    python bench/server/page_load.py [--url http://127.0.0.1:8000] [--rounds 3]

Without --url it starts the repository's server. A benchmark, not a test: it prints figures for
docs/performance.md and asserts nothing."""
from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]
from bench.hosts import CHROMIUM_ARGS, running_server  # noqa: E402

def open_playground(page, url: str) -> None:
    """As a person arrives: the page is ready once its feature list is drawn."""
    page.goto(url)
    page.wait_for_function("() => document.querySelectorAll('#features li').length >= 6")


FIRST_STEP = "() => /^step [1-9]/.test(document.getElementById('status').textContent)"


def load_once(page, url: str) -> dict:
    """One navigation to a first training step; bytes are headers + encoded bodies of every response
    the page and its worker received (a 304 counts its headers only, a cache hit nothing: Chromium
    reports its body size as minus its headers' size, which is how `network` counts the requests
    that reached the server)."""
    sizes = []
    on_finished = lambda r: sizes.append((r.sizes()["responseHeadersSize"], r.sizes()["responseBodySize"]))  # noqa: E731
    page.on("requestfinished", on_finished)
    t0 = time.perf_counter()
    open_playground(page, url)
    ready = time.perf_counter() - t0
    page.select_option("#preset", "tiny")
    page.select_option("#backend", "wasm")
    page.fill("#steps", "100000")
    page.click("#start")
    page.wait_for_function(FIRST_STEP)
    first_step = time.perf_counter() - t0
    page.click("#stop")
    page.wait_for_function("() => /^(Stopped|Finished)/.test(document.getElementById('status').textContent)")
    page.remove_listener("requestfinished", on_finished)
    network = [(h, b) for h, b in sizes if b >= 0]
    return {"requests": len(sizes), "network": len(network), "kB": sum(h + b for h, b in network) / 1000,
            "ready_ms": ready * 1000, "first_step_ms": first_step * 1000}


def measure(url: str, rounds: int) -> dict[str, list[dict]]:
    from playwright.sync_api import sync_playwright

    runs = {"cold": [], "warm": []}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS, headless=True)
        for _ in range(rounds):
            context = browser.new_context()  # a fresh context has an empty HTTP cache
            page = context.new_page()
            page.set_default_timeout(120_000)
            runs["cold"].append(load_once(page, url))
            runs["warm"].append(load_once(page, url))
            context.close()
        browser.close()
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running playground; default: start `tinygpt serve`")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with (contextlib.nullcontext(args.url) if args.url else running_server()) as url:
        runs = measure(url, args.rounds)
    for cache, rows in runs.items():
        for row in rows:
            print(f"{cache}: " + ", ".join(f"{k} {v:,.0f}" for k, v in row.items()))
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"{cache} median of {len(rows)}: " + ", ".join(f"{k} {v:,.0f}" for k, v in med.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
