"""The WGSL trainer timed in headless Chromium's WebGPU: the figure a person's page gets, beside the
Node + Dawn figure of bench.mjs on the same GPU (run_device.sh runs both in one call).

    python bench/webgpu/browser_bench.py [--chromium PATH] [--presets tiny,small] [--steps 30] [--warmup 5]
                                         [--blocks 1] [--clocks-ms 300] [--page-loop STEPS] [--out FILE]
                                         [--allow-software]

Serves the repository on 127.0.0.1 with the playground's headers (`_headers`: cross-origin isolated),
starts Chromium headless on bench/webgpu/browser_bench.html, which times each preset in a module worker
(browser_bench_worker.js, the loop of time_trainer.js) and posts its lines and its result back here.
Needs no Playwright: the lent GPU machine has none, and no browser but the one carried to it
(docs/lab/2026-11-29-wgsl-trainer-in-chromium.md §43). A software adapter (SwiftShader) never gives a
speed figure: without --allow-software (the tests' plumbing check) the run stops at the adapter and says so.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from server.headers import global_headers  # noqa: E402  (the repository on sys.path first)
from bench.js_backends import adapter_name, is_software_adapter  # noqa: E402

# the tests' Chromium flags (tests/support/wasm_support.py), WebGPU on, and a real GPU's Vulkan driver taken
# even where Chromium's GPU blocklist would refuse it (a server's GPU without a display)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic", "--enable-unsafe-webgpu",
                 "--enable-features=Vulkan", "--disable-vulkan-surface", "--ignore-gpu-blocklist"]
PAGE = "/bench/webgpu/browser_bench.html"
PROBE_TIMEOUT = 60  # seconds for the page to name its adapter: a GPU process that cannot start never answers


def serve(messages: queue.Queue):
    """A server of the repository with the playground's headers; POST /line and /result land in `messages`."""
    headers = global_headers()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def end_headers(self):
            for name, value in headers.items():
                self.send_header(name, value)
            super().end_headers()

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            messages.put((self.path, json.loads(body)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(ROOT)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run_page(chromium: str, query: str, timeout: float, extra_args: list[str]) -> dict:
    """The page's result ({adapter, browser, presets, ...}); RuntimeError with the page's error, or
    Chromium's output when the page never answered."""
    messages: queue.Queue = queue.Queue()
    server = serve(messages)
    url = f"http://127.0.0.1:{server.server_address[1]}{PAGE}?{query}"
    with tempfile.TemporaryDirectory(prefix="tinygpt-chromium-") as profile, \
            tempfile.TemporaryFile() as log:
        browser = subprocess.Popen([chromium, *CHROMIUM_ARGS, *extra_args, f"--user-data-dir={profile}", url],
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            waited = 0.0
            while True:
                try:
                    path, body = messages.get(timeout=1.0)
                except queue.Empty:
                    waited += 1.0
                    if browser.poll() is not None:
                        raise RuntimeError("Chromium ended before the page answered") from None
                    if waited >= timeout:
                        raise RuntimeError(f"no word from the page in {timeout:.0f} s") from None
                    continue
                waited = 0.0
                if path == "/line":
                    print(f"  {body}", file=sys.stderr, flush=True)
                    continue
                if "error" in body:
                    raise RuntimeError(f"the page failed: {body['error']}")
                return body["result"]
        except RuntimeError as e:
            if browser.poll() is not None:
                e.args = (f"{e.args[0]}; Chromium exited {browser.returncode}",)
            log.seek(0)
            tail = log.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"{e.args[0]}\nChromium's output:\n{tail}") from None
        finally:
            browser.kill()
            browser.wait()
            server.shutdown()
            server.server_close()


def decode_job_of(new_tokens: int, variants: tuple[str, ...] = (), rounds: int | None = None) -> dict:
    """decode_bench.py's job for its wgsl-node engine: its prompt ("\n"), the page's sampling defaults, seed 0;
    variants: time_decode.js's DECODE_VARIANTS to time too; rounds: exactly this many (default decode_bench.py's
    ROUNDS)."""
    from python_ref.config import sampling_defaults
    from bench.decode import decode_job

    defaults = sampling_defaults()
    job = decode_job(new_tokens, b"\n", {"temperature": defaults["temperature"], "topK": defaults["topK"], "seed": 0},
                     None if rounds is None else {"min": rounds, "max": rounds, "seconds": 0})
    return {**job, "variants": list(variants)}


def decode_query(presets: str, job: dict) -> str:
    """The page's query for decoding at `presets` (comma-separated) with time_decode.js's `job`."""
    return f"decodePresets={presets}&decode={urllib.parse.quote(json.dumps(job))}"


def decode_in_page(chromium: str, preset: str, job: dict, browser_args: list[str], timeout: float = 600) -> dict:
    """One preset's decode in the page's worker, for decode_bench.py's wgsl-chromium engine: the page's
    result, {adapter, browser, decode: [time_decode.js's timings]}."""
    return run_page(chromium, decode_query(preset, job), timeout, browser_args)


def decode_result(r: dict, new_tokens: int) -> dict:
    """A preset's decode in the page, with decode_bench.py's figures (the digest of the KV cache's tokens
    equal to another engine's: the same text, so the same work) and each mode's rounds."""
    from bench.decode import decode_figures, js_run

    return {"engine": "wgsl-chromium", "preset": r["preset"], "new_tokens": new_tokens,
            **decode_figures(new_tokens, js_run(r)),
            "kv_rounds_ms": r["kv"]["roundsMs"], "recompute_rounds_ms": r["recompute"]["roundsMs"],
            "variant_rounds_ms": {name: v["roundsMs"] for name, v in r.get("variants", {}).items()}}


def describe_adapter(page: dict) -> dict:
    """A page's browser and adapter, said on stderr: the JSON's first keys."""
    adapter = page["adapter"]
    software = is_software_adapter(adapter)
    kind = " (software)" if software else ""
    print(f"{page['browser']}: WebGPU adapter {adapter_name(adapter)}{kind}", file=sys.stderr)
    return {"browser": page["browser"], "adapter": adapter, "software": software, "presets": []}


def main(argv=None) -> int:
    from bench.decode import variant_names

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chromium", default=shutil.which("chromium"), help="the browser (default: chromium on PATH)")
    ap.add_argument("--presets", default="tiny,small,medium,large,xl,huge,massive")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=1)
    ap.add_argument("--clocks-ms", type=int, default=300)
    ap.add_argument("--page-loop", type=int, default=0,
                    help="also time this many steps a round in the page's own loop (time_trainer.js timePageLoop)")
    ap.add_argument("--decode-presets", default="",
                    help="also decode NEW_TOKENS at these presets: KV cache against recompute (decode_bench.py)")
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--decode-variants", type=variant_names, default=(),
                    help="also decode with these trainers of time_decode.js's DECODE_VARIANTS, comma-separated, "
                    "in the same rounds (an A/B)")
    ap.add_argument("--decode-rounds", type=int, default=None,
                    help="exactly this many decode rounds of each mode (default: decode_bench.py's ROUNDS, at least 3 "
                    "for a median; a software adapter's token check takes 1)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds to wait for each word from the page")
    ap.add_argument("--browser-arg", action="append", default=[], help="one more Chromium flag (repeatable)")
    ap.add_argument("--allow-software", action="store_true",
                    help="run on a software adapter too (a correctness check of the plumbing, never a speed)")
    ap.add_argument("--out", help="the JSON's file (default: stdout)")
    args = ap.parse_args(argv)
    if not args.chromium:
        ap.error("no chromium on PATH: name the browser with --chromium")
    if args.blocks < 1 or args.steps % args.blocks:
        ap.error(f"--blocks {args.blocks}: a whole divisor of --steps {args.steps}")
    if args.decode_rounds is not None and args.decode_rounds < 1:
        ap.error(f"--decode-rounds {args.decode_rounds}: at least 1")
    # the adapter first, in a page of its own, so that a software one is refused before any work; with
    # --allow-software the work's page names it (and takes no clocks on it, browser_bench_worker.js): one
    # Chromium, not two
    probe = None if args.allow_software else run_page(args.chromium, "", min(args.timeout, PROBE_TIMEOUT),
                                                      args.browser_arg)
    out = None if probe is None else describe_adapter(probe)
    if out is not None and out["software"]:
        print(f"software adapter {adapter_name(probe['adapter'])}: no speed figure", file=sys.stderr)
        out["refused"] = "software adapter: no speed figure"
    else:
        query = (f"presets={args.presets}&steps={args.steps}&warmup={args.warmup}&blocks={args.blocks}"
                 f"&clocksMs={args.clocks_ms}&pageLoop={args.page_loop}")
        if args.decode_presets:
            query += "&" + decode_query(args.decode_presets, decode_job_of(args.new_tokens, args.decode_variants,
                                                                              args.decode_rounds))
        result = run_page(args.chromium, query, args.timeout, args.browser_arg)
        out = out or describe_adapter(result)
        out.update(subgroups=result.get("subgroups"), presets=result["presets"])
        if args.decode_presets:
            out["decode"] = [decode_result(r, args.new_tokens) for r in result["decode"]]
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 2 if "refused" in out else 0


if __name__ == "__main__":
    sys.exit(main())
