"""The playground in headless Chromium against the real server: it is cross-origin isolated and says
what the browser can use, trains in its backend Worker with the build the loader picks (loss falls,
speed shown), stops on request and streams a sample."""
from __future__ import annotations

import re

from e2e.page_actions import open_playground, parse, screenshot, start_long_run, status, train


def test_page_is_isolated_and_reports_what_the_browser_supports(server_url, page):
    open_playground(page, server_url)
    assert page.evaluate("crossOriginIsolated") is True
    features = page.locator("#features").inner_text()
    print("\n" + features)
    assert "WebAssembly threads: cross-origin isolated" in features
    assert "WebAssembly relaxed SIMD (fused multiply-add)" in features
    # Headless Chromium's WebGPU adapter is SwiftShader: the page must not pass it off as a GPU.
    assert re.search(r"WebGPU: .*software adapter|No WebGPU", features), features
    if "No WebGPU" not in features:
        # what the adapter offers beyond core WebGPU, each said (SwiftShader: subgroups, no shader-f16)
        assert re.search(r"WebGPU subgroups: used|No WebGPU subgroups", features), features
        assert re.search(r"WebGPU shader-f16: offered|No WebGPU shader-f16 on this adapter", features), features
    options = page.locator("#preset option").evaluate_all("os => os.map(o => o.value)")
    assert options[:5] == ["tiny", "small", "medium", "large", "xl"]
    assert page.locator("#preset").input_value() == "small"  # presets.json's defaultPreset
    assert page.locator("#backend option").evaluate_all("os => os.map(o => o.value)") == ["auto", "wasm", "webgpu"]
    page.wait_for_function("/parameters · WebAssembly: needs/.test(document.getElementById('preset-info').textContent)")
    info = page.locator("#preset-info").inner_text()
    choice = page.locator("#backend-choice").inner_text()
    print(info + "\n" + choice)
    assert "Auto chose WebAssembly" in choice  # no hardware adapter here
    screenshot(page, "playground_features")
    assert page.errors == []


def test_trains_in_the_worker_and_samples(server_url, page):
    open_playground(page, server_url)
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
    stats = page.locator("#sample-stats").inner_text()
    print(repr(out), stats)
    assert out.startswith("ROMEO:") and len(out) > len("ROMEO:") + 20
    assert re.search(r"time to first token \d+ ms · 80 tokens · \d+ tokens/s", stats), stats
    screenshot(page, "playground_trained_and_sampled")
    assert page.errors == []


def test_stop_ends_a_run_early(server_url, page):
    open_playground(page, server_url)
    start_long_run(page)
    page.click("#stop")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('Stopped')")
    r = parse(status(page))
    print(f"\nstopped at step {r['step']}")
    assert 0 < r["step"] < 100000
    assert not page.locator("#start").is_disabled()
    assert page.errors == []
