"""The page at phone width and in the dark: nothing wider than a 360 px screen, the chart drawn at
its CSS size × devicePixelRatio with an empty-state sentence before training, a dark background when
the system asks for one, and the accessible parts (chart as an image with a text summary, a live
status that is not rewritten more than once a second)."""
from __future__ import annotations

from e2e.page_actions import open_playground, screenshot, train, watched

OVERFLOWING = """() => [...document.querySelectorAll('body *')].filter((e) => {
  const r = e.getBoundingClientRect();
  return r.width > 0 && r.right > document.documentElement.clientWidth + 0.5;
}).map((e) => e.id || e.tagName)"""


def test_phone_width_has_no_horizontal_overflow(server_url, browser):
    context = browser.new_context(viewport={"width": 360, "height": 740}, device_scale_factor=2, is_mobile=True)
    page = watched(context.new_page())
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        open_playground(page, server_url)
        page.wait_for_function("document.getElementById('corpus-info').textContent.includes('validation')")
        chart = page.evaluate("(() => { const c = document.getElementById('chart'); "
                              "return {w: c.width, h: c.height, cssW: c.clientWidth, cssH: c.clientHeight, "
                              "dpr: devicePixelRatio}; })()")
        summary = page.locator("#chart-summary").inner_text()
        print(f"\n360 px: chart backing store {chart['w']}×{chart['h']} "
              f"for CSS {chart['cssW']}×{chart['cssH']} at dpr {chart['dpr']}; summary: {summary!r}")
        assert chart["w"] == round(chart["cssW"] * 2) and chart["h"] == round(chart["cssH"] * 2)
        assert summary == "Loss chart: no losses yet."
        for source in ["shakespeare", "paste", "file", "hf"]:  # every corpus panel fits too
            page.select_option("#corpus-source", source)
            width = page.evaluate("document.documentElement.scrollWidth")
            wide = page.evaluate(OVERFLOWING)
            print(f"corpus source {source}: scrollWidth {width}, overflowing {wide}")
            assert width <= 360 and wide == []
        page.select_option("#corpus-source", "shakespeare")
        preset = page.locator("#preset").bounding_box()
        card = page.locator("#train").bounding_box()
        assert preset["x"] + preset["width"] <= card["x"] + card["width"]
        train(page, "tiny", 30)
        # the summary is rewritten at most once a second: the last losses land within that second
        page.wait_for_function("document.getElementById('chart-summary').textContent.includes('Training loss')",
                               timeout=3000)
        width = page.evaluate("document.documentElement.scrollWidth")
        print(f"after training: scrollWidth {width}; summary {page.locator('#chart-summary').inner_text()!r}")
        assert width <= 360 and page.evaluate(OVERFLOWING) == []
        screenshot(page, "layout_360px")
        assert errors == []
    finally:
        context.close()


def test_dark_theme_follows_the_system(server_url, browser):
    context = browser.new_context(color_scheme="dark", viewport={"width": 1000, "height": 900})
    page = watched(context.new_page())
    try:
        open_playground(page, server_url)
        colours = page.evaluate("""[document.documentElement, document.body, document.getElementById('train'),
          document.getElementById('sample-output')].map((e) => getComputedStyle(e).backgroundColor)""")
        text = page.evaluate("getComputedStyle(document.body).color")
        print(f"\ndark: backgrounds {colours}, text {text}")
        assert colours[0] == "rgb(18, 18, 20)" and colours[2] == "rgb(28, 28, 31)"
        assert text == "rgb(232, 232, 234)"
        screenshot(page, "layout_dark")
    finally:
        context.close()


def test_chart_and_status_for_screen_readers(server_url, page):
    open_playground(page, server_url)
    assert page.get_attribute("#chart", "role") == "img"
    assert page.get_attribute("#status-live", "aria-live") == "polite"
    # count the live region's rewrites while a run shows a new step many times a second
    page.evaluate("""window.liveWrites = []; new MutationObserver(() => window.liveWrites.push(performance.now()))
      .observe(document.getElementById('status-live'), {childList: true, characterData: true, subtree: true})""")
    train(page, "tiny", 300)
    writes = page.evaluate("window.liveWrites")
    gaps = [b - a for a, b in zip(writes, writes[1:])]
    steps = len([x for x in page.evaluate("window.playground.losses") if x is not None])
    print(f"\n{steps} steps shown; the live status was rewritten {len(writes)} times, smallest gap "
          f"{min(gaps, default=0):.0f} ms; it says {page.locator('#status-live').inner_text()!r}")
    assert all(g >= 990 for g in gaps)
    page.wait_for_timeout(1100)  # the last text lands within a second
    assert page.locator("#status-live").inner_text() == page.locator("#status").inner_text()
    assert page.errors == []
