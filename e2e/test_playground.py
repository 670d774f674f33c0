"""The playground page in headless Chromium against the real server: it is cross-origin isolated and
says what the browser supports, trains in its Worker with the build the loader picks (loss falls,
speed shown), stops on request, streams a sample, and without COOP/COEP falls back visibly."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from server_process import running_server

ROOT = Path(__file__).resolve().parent.parent


def status(page) -> str:
    return page.locator("#status").inner_text()


def train(page, preset: str, steps: int) -> str:
    page.select_option("#preset", preset)
    page.fill("#steps", str(steps))
    page.click("#start")
    page.wait_for_function("() => /^(Finished|Stopped|Error)/.test(document.getElementById('status').textContent)")
    return status(page)


def parse(text: str) -> dict:
    m = re.search(r"step (\d+)/(\d+) · loss ([\d.]+)(?: · validation ([\d.]+))? · ([\d,]+) tokens/s · ([\d.]+) ms/step", text)
    assert m, text
    return {"step": int(m[1]), "steps": int(m[2]), "loss": float(m[3]),
            "val": float(m[4]) if m[4] else None, "tokens_per_s": int(m[5].replace(",", "")), "ms": float(m[6])}


def test_page_is_isolated_and_reports_what_the_browser_supports(server_url, page):
    page.goto(server_url)
    assert page.evaluate("crossOriginIsolated") is True
    page.wait_for_function("document.querySelectorAll('#features li').length >= 6")
    features = page.locator("#features").inner_text()
    print("\n" + features)
    assert "WebAssembly threads: cross-origin isolated" in features
    assert "WebAssembly relaxed SIMD" in features
    # Headless Chromium's WebGPU adapter is SwiftShader: the page must not pass it off as a GPU.
    assert re.search(r"WebGPU: .*software adapter|No|not available|no adapter", features, re.I), features
    options = page.locator("#preset option").evaluate_all("os => os.map(o => o.value)")
    assert options[:5] == ["tiny", "small", "medium", "large", "xl"]
    assert page.locator("#preset").input_value() == "small"  # presets.json's defaultPreset
    assert page.errors == []


def test_trains_in_the_worker_and_samples(server_url, page):
    page.goto(server_url)
    text = train(page, "tiny", 60)
    r = parse(text)
    build = page.locator("#build").inner_text()
    print(f"\n{text}\n{build}")
    assert text.startswith("Finished") and r["step"] == 60
    assert "relaxed" in build and "Why: cross-origin isolated" in build
    # From ~ln(256) = 5.55 at the start; the evaluation at the last step is shown.
    assert r["loss"] < 4.5 and r["val"] is not None and r["val"] < 4.5
    assert r["tokens_per_s"] > 0
    page.fill("#prompt", "ROMEO:")
    page.fill("#max-new", "80")
    page.click("#sample-button")
    page.wait_for_function("!document.getElementById('sample-button').disabled")
    out = page.locator("#sample-output").inner_text()
    print(repr(out))
    assert out.startswith("ROMEO:") and len(out) > len("ROMEO:") + 20
    assert page.errors == []


def test_stop_ends_a_run_early(server_url, page):
    page.goto(server_url)
    page.select_option("#preset", "tiny")
    page.fill("#steps", "100000")
    page.click("#start")
    page.wait_for_function("/step [1-9]\\d*\\//.test(document.getElementById('status').textContent)")
    page.click("#stop")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('Stopped')")
    r = parse(status(page))
    print(f"\nstopped at step {r['step']}")
    assert 0 < r["step"] < 100000
    assert not page.locator("#start").is_disabled()


def test_without_cross_origin_isolation_it_says_so_and_trains_single_threaded(tmp_path, page):
    """The static dist/ served by a plain file server (no COOP/COEP headers): the loader falls back
    to the single-threaded SIMD build, and the page says why."""
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "server", "build", "--out", str(dist)], cwd=ROOT, check=True,
                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    plain = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(dist), "{port}"]
    with running_server(plain) as url:
        page.goto(url)
        assert page.evaluate("crossOriginIsolated") is False
        page.wait_for_function("document.querySelectorAll('#features li').length >= 6")
        assert "No WebAssembly threads: not cross-origin isolated" in page.locator("#features").inner_text()
        text = train(page, "tiny", 5)
        build = page.locator("#build").inner_text()
        print(f"\n{text}\n{build}")
        assert text.startswith("Finished")
        assert "build: simd (1 thread)" in build and "not cross-origin isolated" in build
