"""The playground and its docs pages for a person who uses a keyboard or a screen reader: axe-core (npm,
package.json; injected through the DevTools protocol, which the page's Content-Security-Policy does not
govern, as a <script> tag would be) finds no serious or critical violation on the page, in use and in both
themes, nor on /learn, /format, /performance and /lab/; a form error moves the focus to its field, which
is marked invalid and described by its message; and with the keyboard alone every control is reached
(Tab), shows where the focus is, and works: train, sample (Ctrl+Enter), reuse a seed, open the upload."""
from __future__ import annotations

import contextlib

import pytest

from e2e.page_actions import FINISHED, ROOT, open_playground, screenshot, watched

AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")


@pytest.fixture(scope="module")
def axe_source():
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: `make lint-setup` installs axe-core with the linters (package.json)")
    return AXE.read_text()


def axe(page, source: str) -> list:
    """axe-core's violations of the page as it is now: [{id, impact, help, nodes: [target]}]."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(source)
    found = page.evaluate("""async () => (await axe.run(document, {resultTypes: ['violations']})).violations
        .map((v) => ({id: v.id, impact: v.impact, help: v.help,
                      nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 6), count: v.nodes.length}))""")
    return found


def report(where: str, violations: list) -> list:
    print(f"\n{where}: {len(violations)} kinds of violation")
    for v in violations:
        print(f"  [{v['impact']}] {v['id']}: {v['help']} ({v['count']}×: {v['nodes']})")
    return [v for v in violations if v["impact"] in BLOCKING]


@contextlib.contextmanager
def fresh_page(browser, **options):
    context = browser.new_context(**options)
    try:
        p = watched(context.new_page())
        yield p
        assert p.errors == [] and p.csp_violations == [], (p.errors, p.csp_violations)
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_nothing_serious_on_the_playground_in_use(browser, server_url, axe_source, scheme):
    with fresh_page(browser, viewport={"width": 1440, "height": 900}, color_scheme=scheme) as page:
        open_playground(page, server_url)
        blocking = report(f"playground ({scheme}), fresh", axe(page, axe_source))
        # in use: a model trained and saved, a sample with its logit view, a heatmap, a form error shown
        page.select_option("#preset", "tiny")
        page.fill("#steps", "10")
        page.click("#start")
        page.wait_for_function(FINISHED)
        page.wait_for_function("window.playground.saved.length > 0")
        page.fill("#max-new", "60")
        page.click("#sample-button")
        page.wait_for_function("!document.getElementById('sample-button').disabled")
        page.click("#attention-button")
        page.wait_for_function("window.playground.attention?.T > 0")
        page.fill("#temperature", "hot")
        page.click("#sample-button")
        blocking += report(f"playground ({scheme}), in use", axe(page, axe_source))
        page.set_viewport_size({"width": 360, "height": 740})  # the narrow layout: saved models as cards
        blocking += report(f"playground ({scheme}) at 360 px", axe(page, axe_source))
        assert blocking == [], blocking


@pytest.mark.parametrize("path", ["learn", "format", "performance", "lab/"])
def test_axe_finds_nothing_serious_on_the_docs_pages(browser, server_url, axe_source, path):
    blocking = []
    for scheme in ("light", "dark"):
        with fresh_page(browser, color_scheme=scheme) as page:
            page.goto(f"{server_url}/{path}")
            page.wait_for_load_state("load")
            blocking += report(f"/{path} ({scheme})", axe(page, axe_source))
    assert blocking == [], blocking


def test_a_form_error_takes_the_focus_to_its_field_and_describes_it(server_url, page):
    open_playground(page, server_url)
    page.fill("#steps", "abc")
    page.focus("#start")
    page.keyboard.press("Enter")
    tied = page.evaluate("""(() => { const f = document.activeElement, d = f.getAttribute('aria-describedby');
      return {focused: f.id, invalid: f.getAttribute('aria-invalid'), describedby: d,
              description: d && document.getElementById(d)?.textContent.trim(),
              inAlert: d && document.getElementById(d)?.closest('[role=alert]')?.id}; })()""")
    print(f"\nTrain with Steps 'abc': {tied}")
    assert tied["focused"] == "steps" and tied["invalid"] == "true"
    assert tied["description"] == 'Steps "abc" is not a number.' and tied["inAlert"] == "train-errors"
    page.fill("#steps", "20")
    page.fill("#checkpoint-seconds", "0")
    page.click("#start")
    seconds = page.evaluate("""(() => { const f = document.activeElement;
      return [f.id, document.getElementById(f.getAttribute('aria-describedby')).textContent.trim()]; })()""")
    steps_after = page.evaluate("[document.getElementById('steps').getAttribute('aria-invalid'), "
                                "document.getElementById('steps').getAttribute('aria-describedby')]")
    print(f"then Save every 0: focus and description {seconds}; Steps now {steps_after}")
    assert seconds[0] == "checkpoint-seconds" and seconds[1].startswith("Save every 0 is out of range")
    assert steps_after == [None, None]  # a field made valid is no longer marked or described
    screenshot(page, "accessibility_form_error")
    assert page.errors == []


def focus_ring(page) -> dict:
    """The element in focus and whether a ring shows it (an outline or a box shadow)."""
    return page.evaluate("""(() => { const e = document.activeElement, s = getComputedStyle(e);
      const outline = s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 1;
      return {id: e.id || e.name || e.getAttribute('aria-label') || e.textContent.trim().slice(0, 24) || e.tagName,
              tag: e.tagName, ring: outline || (s.boxShadow !== 'none')}; })()""")


# what a person can operate: enabled, rendered, not taken out of the tab order
OPERABLE = """() => [...document.querySelectorAll('a[href], button, input, select, textarea, [tabindex]')]
  .filter((e) => !e.disabled && e.tabIndex >= 0 && e.getClientRects().length
    && !e.closest('[hidden], dialog:not([open])') && getComputedStyle(e).visibility !== 'hidden')
  .map((e) => e.id || e.name || e.getAttribute('aria-label') || e.textContent.trim().slice(0, 24) || e.tagName)"""


def tab_through(page) -> list:
    """Presses Tab until the focus has gone once round the page (past the browser's own controls, where the
    page's body holds it); each stop on the page with its ring."""
    stops = []
    for _ in range(400):
        page.keyboard.press("Tab")
        ring = focus_ring(page)
        if ring["tag"] == "BODY":
            continue
        if stops and ring == stops[0] and len(stops) > 1:
            break
        stops.append(ring)
    return stops


def test_keyboard_alone_reaches_and_operates_every_control(browser, server_url):
    with fresh_page(browser, viewport={"width": 1440, "height": 900}) as page:
        open_playground(page, server_url)
        page.wait_for_function("window.playground.presetsMarked !== undefined")
        # train with the keyboard: Tab to Preset, pick tiny with the arrows, type the steps, Enter on Train
        page.focus("#corpus-source")
        while focus_ring(page)["id"] != "preset":
            page.keyboard.press("Tab")
        page.keyboard.press("Home")  # the first preset: tiny
        page.keyboard.press("Tab")  # Backend
        page.keyboard.press("Tab")  # Steps
        page.keyboard.press("Control+a")
        page.keyboard.type("10")
        assert page.input_value("#preset") == "tiny" and page.input_value("#steps") == "10"
        page.focus("#start")
        page.keyboard.press("Enter")
        page.wait_for_function(FINISHED)
        page.wait_for_function("window.playground.saved.length > 0")
        print(f"\ntrained with the keyboard: {page.locator('#status').inner_text()}")
        assert page.locator("#status").inner_text().startswith("Finished: step 10/10")

        stops = tab_through(page)
        reached = {s["id"] for s in stops}
        operable = page.evaluate(OPERABLE)
        missed = [c for c in operable if c not in reached]
        unringed = [s["id"] for s in stops if not s["ring"]]
        print(f"{len(stops)} Tab stops, {len(operable)} operable controls; not reached: {missed}; "
              f"no focus ring: {unringed}\nstops: {[s['id'] for s in stops]}")
        assert missed == [] and unringed == []

        # sample from the prompt with Ctrl+Enter, then put the random seed back with Space on its button
        page.focus("#prompt")
        page.keyboard.press("Control+a")
        page.keyboard.type("ROMEO:")
        page.keyboard.press("Enter")  # a new line, not a sample
        page.keyboard.type("But soft")
        assert page.input_value("#prompt") == "ROMEO:\nBut soft" and page.locator("#sample-output").inner_text() == ""
        page.keyboard.press("Control+Enter")
        page.wait_for_function("!document.getElementById('sample-button').disabled && "
                               "document.getElementById('sample-stats').textContent !== ''")
        first = page.locator("#sample-output").inner_text()
        page.focus("#reuse-seed")
        page.keyboard.press("Space")
        assert page.evaluate("document.activeElement.id") == "sample-seed" and page.input_value("#sample-seed")
        page.focus("#sample-button")
        page.keyboard.press("Enter")
        page.wait_for_function("!document.getElementById('sample-button').disabled && "
                               "document.getElementById('sample-stats').textContent !== ''")
        assert page.locator("#sample-output").inner_text() == first
        print(f"sampled with Ctrl+Enter, then again with its seed (Space, Enter): {first[:40]!r}…")
        page.focus("#attention-button")
        page.keyboard.press("Enter")
        page.wait_for_function("window.playground.attention?.T > 0")
        page.focus("#attention-canvas")
        page.keyboard.press("ArrowLeft")  # the heatmap's cells, one key at a time
        assert page.locator("#attention-cell").inner_text().startswith("query 14 't' → key 13 'f'")
        # once more round, with the sample's bytes and the heatmap on the page: each reached, each ringed
        stops = tab_through(page)
        operable = page.evaluate(OPERABLE)
        missed = [c for c in operable if c not in {s["id"] for s in stops}]
        unringed = [s["id"] for s in stops if not s["ring"]]
        print(f"with a sample and a heatmap: {len(stops)} Tab stops, {len(operable)} operable controls; "
              f"not reached: {missed}; no focus ring: {unringed}")
        assert missed == [] and unringed == [] and {"attention-canvas", "sample-output"} <= {s["id"] for s in stops}
        with page.expect_file_chooser() as chooser:  # the upload opens from the keyboard too
            page.focus("#upload")
            page.keyboard.press("Space")
        assert chooser.value.element.get_attribute("id") == "upload"
        page.focus("#sample-button")
        screenshot(page, "accessibility_keyboard")
