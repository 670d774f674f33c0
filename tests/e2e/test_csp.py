"""The Content-Security-Policy of `_headers` as the browser applies it: every response carries it, the
page loads and trains under it (every e2e test fails on a violation: conftest.py), and a request to a
host outside connect-src is blocked, with the violation reported."""
from __future__ import annotations

import urllib.request

from bench.hosts import free_port
from e2e.page_actions import open_playground, train
from server.headers import global_headers

REQUIRED = ["default-src 'self'", "script-src 'self' 'wasm-unsafe-eval'", "worker-src 'self'",
            "connect-src 'self' https://datasets-server.huggingface.co", "frame-ancestors 'none'", "object-src 'none'"]


def test_every_response_carries_the_policy(server_url):
    policy = global_headers()["Content-Security-Policy"]
    print(f"\n_headers: {policy}")
    assert all(d in policy for d in REQUIRED) and "unsafe-inline" not in policy
    for path in ("/", "/static/js/app.js", "/webgpu/trainer.js", "/learn", "/no-such-page"):
        try:
            headers = urllib.request.urlopen(server_url + path, timeout=10).headers
        except urllib.error.HTTPError as e:
            headers = e.headers
        served = headers["Content-Security-Policy"]
        print(f"{path}: {served[:60]}…")
        assert all(d.split(" 'self'")[0] in served for d in REQUIRED)


def test_the_page_trains_under_the_policy(server_url, page):
    open_playground(page, server_url)
    print(f"\n{train(page, 'tiny', 5)}; CSP violations: {page.csp_violations}")
    assert page.csp_violations == [] and page.errors == []


def test_a_request_outside_the_policy_is_blocked(server_url, page):
    open_playground(page, server_url)
    outside = f"http://127.0.0.1:{free_port()}/"
    result = page.evaluate("""async (url) => {
      const seen = new Promise((resolve) => document.addEventListener("securitypolicyviolation",
        (e) => resolve({directive: e.violatedDirective, blocked: e.blockedURI}), {once: true}));
      let fetched;
      try { await fetch(url); fetched = "fetched"; } catch (e) { fetched = `${e.name}: ${e.message}`; }
      return {fetched, violation: await seen};
    }""", outside)
    print(f"\nfetch({outside}): {result['fetched']}; violation {result['violation']}; console: {page.csp_violations}")
    assert result["fetched"].startswith("TypeError") and result["violation"]["directive"] == "connect-src"
    assert result["violation"]["blocked"].startswith(outside.rstrip("/"))
    assert page.csp_violations and all(outside in m for m in page.csp_violations)
    assert any("connect-src" in m for m in page.csp_violations)
    page.csp_violations.clear()  # the one this test provoked
