"""Playwright fixtures: the real server process and Debian's headless Chromium (never a
playwright-downloaded browser), with WebGPU exposed (SwiftShader: correctness only).

Two stand-ins of Hugging Face's datasets-server run for the whole session (tests/support/
hf_rows_stand_in.py): one over HTTPS that the browser reaches at the official origin (its name resolved
to the stand-in, its certificate accepted), and one over HTTP that pages name with ?datasets-server=,
also under a look-alike host name. The server allows the HTTP one in its Content-Security-Policy
(`serve --connect-src`). Every page records Content-Security-Policy violations, and a test fails on one
it did not expect (`page.csp_violations`, cleared by a test that provokes one)."""
from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from e2e.page_actions import watched
from support.hf_rows_stand_in import OFFICIAL_HOST, running_stand_in
from support.server_process import require_site_builds, running_server
from support.wasm_support import CHROMIUM_ARGS

LOOKALIKE_HOST = OFFICIAL_HOST + ".example.invalid"


@pytest.fixture(scope="session")
def hf_stand_ins():
    with running_stand_in() as plain, running_stand_in(tls=True) as official:
        port = plain.rsplit(":", 1)[1]
        yield SimpleNamespace(plain=plain, lookalike=f"http://{LOOKALIKE_HOST}:{port}",
                              official_port=official.rsplit(":", 1)[1])


@pytest.fixture(scope="session")
def server_url(hf_stand_ins):
    require_site_builds()
    with running_server(options=["--connect-src", hf_stand_ins.plain, "--connect-src", hf_stand_ins.lookalike]) as url:
        yield url


# Per module, not per session: Playwright's sync API allows one running instance per thread, and
# the browser tests under tests/ start their own.
@pytest.fixture(scope="module")
def browser(hf_stand_ins):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (make setup)")
    exe = shutil.which("chromium")
    if not exe:
        pytest.fail("chromium is not installed (make setup installs the Debian package)")
    with sync_api.sync_playwright() as pw:
        rules = f"MAP {OFFICIAL_HOST} 127.0.0.1:{hf_stand_ins.official_port},MAP {LOOKALIKE_HOST} 127.0.0.1"
        b = pw.chromium.launch(executable_path=exe, headless=True, args=[
            *CHROMIUM_ARGS, "--enable-unsafe-webgpu", f"--host-resolver-rules={rules}", "--ignore-certificate-errors"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context()
    p = watched(context.new_page())
    try:
        yield p
        assert p.csp_violations == [], f"Content-Security-Policy violations: {p.csp_violations}"
    finally:
        context.close()
