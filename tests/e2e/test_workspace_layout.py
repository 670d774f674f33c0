"""The playground's layout as a person sees it: on a wide screen a workspace (the controls beside the loss
chart and the sample, both on screen at once); at 360 px and at 200% zoom every control within the
screen's width, the saved models as cards; the dark theme on every part, the attention heatmap included,
with a colour legend; a long prompt's heatmap readable (cells big enough for every label, scrolling in its
own box, following the keyboard); and what the first load costs: its bytes and the time until Train works."""
from __future__ import annotations

import contextlib
import re
import time

import pytest

from e2e.page_actions import SCREENSHOTS, open_playground, screenshot, train, watched

# Whether an element past the screen's edge lies inside a box that scrolls or clips it and itself fits
# the screen (the heatmap's scroll box, a visually hidden table head): reachable by scrolling that box.
INSIDE_A_BOX = """const insideABox = (e) => {
  for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
    if (getComputedStyle(a).overflowX !== 'visible') return a.getBoundingClientRect().right <= innerWidth + 0.5;
  }
  return false;
};"""

# every element wider than the screen (saved models are cards: no table scrolls sideways)
OVERFLOWING = """() => { %s
  return [...document.querySelectorAll('body *')].filter((e) => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.right > document.documentElement.clientWidth + 0.5 && !insideABox(e);
  }).map((e) => e.id || e.className || e.tagName); }""" % INSIDE_A_BOX

# every control a person operates, with its box: none may lie past the screen's right edge
CONTROLS = """() => { %s
  return [...document.querySelectorAll('button, input, select, textarea, a[href], [tabindex]')]
  .filter((e) => e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden')
  .map((e) => { const r = e.getBoundingClientRect();
    return {id: e.id || e.name || e.textContent.trim().slice(0, 20) || e.tagName, left: r.left, right: r.right,
            inBox: insideABox(e)}; }); }""" % INSIDE_A_BOX

@contextlib.contextmanager
def fresh_page(browser, **options):
    context = browser.new_context(**options)
    try:
        p = watched(context.new_page())
        yield p
        assert p.errors == [] and p.csp_violations == [], (p.errors, p.csp_violations)
    finally:
        context.close()


def viewport_shot(page, name: str):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def sample(page, tokens: int = 60, seed: str = "1"):
    page.fill("#max-new", str(tokens))
    page.fill("#sample-seed", seed)
    page.click("#sample-button")
    page.wait_for_function("!document.getElementById('sample-button').disabled && "
                           "document.getElementById('sample-stats').textContent !== ''")


def show_attention(page):
    page.click("#attention-button")
    page.wait_for_function("window.playground.attention?.T > 0 && "
                           "document.getElementById('attention-cell').textContent !== ''")


def box(page, selector: str) -> dict:
    return page.locator(selector).bounding_box()


def luminance(css_colour: str) -> float:
    r, g, b = (int(float(v)) / 255 for v in re.findall(r"[\d.]+", css_colour)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_a_wide_screen_is_a_workspace(browser, server_url):
    with fresh_page(browser, viewport={"width": 1440, "height": 900}) as page:
        open_playground(page, server_url)
        train(page, "tiny", 30)
        page.fill("#prompt", "ROMEO:\nBut soft")
        sample(page)
        show_attention(page)
        page.evaluate("window.scrollTo(0, 0)")
        train_box, progress, chart, sample_box, button = (box(page, s) for s in (
            "#train", "#progress", "#chart", "#sample", "#start"))
        print(f"\n1440x900: Train x {train_box['x']:.0f}-{train_box['x'] + train_box['width']:.0f}, "
              f"chart x {chart['x']:.0f}-{chart['x'] + chart['width']:.0f} y {chart['y']:.0f}-"
              f"{chart['y'] + chart['height']:.0f}, sample x {sample_box['x']:.0f} y {sample_box['y']:.0f}, "
              f"Train button y {button['y']:.0f}")
        # two columns: the controls on the left, the run's chart and the sample on the right
        assert train_box["x"] + train_box["width"] < progress["x"] and progress["x"] == sample_box["x"]
        assert chart["width"] > 700, "the chart takes the wide column"
        # the controls, the chart and the start of the sample are on the first screen together
        for name, b in [("Train button", button), ("chart", chart)]:
            assert b["y"] + b["height"] <= 900, f"{name} is below the first screen"
        assert sample_box["y"] < 900
        assert page.evaluate("document.documentElement.scrollWidth") <= 1440
        # the saved models in the column: every button on screen, nothing scrolled sideways inside its box
        page.wait_for_function("window.playground.saved.length > 0")
        saved = page.evaluate("""(() => { const s = document.querySelector('#saved .table-scroll');
          return {box: [s.clientWidth, s.scrollWidth], layout: getComputedStyle(document.querySelector(
            '#checkpoints tbody tr')).display, buttons: [...document.querySelectorAll('#checkpoints tbody button')]
            .map((b) => Math.round(b.getBoundingClientRect().right))}; })()""")
        print(f"saved models: box {saved['box'][0]} px showing {saved['box'][1]} px, rows as {saved['layout']}, "
              f"buttons' right edges {saved['buttons']}")
        assert saved["box"][1] <= saved["box"][0] + 1 and max(saved["buttons"]) <= 1440 - 16
        print(f"screenshots {viewport_shot(page, 'workspace_1440')} {screenshot(page, 'workspace_1440_full')}")


@pytest.mark.parametrize("name,options", [
    ("360px", {"viewport": {"width": 360, "height": 740}, "device_scale_factor": 2, "is_mobile": True}),
    # a 1280x800 window at 200% zoom: 640x400 CSS px at 2 device px each, as the browser lays it out
    ("zoom200", {"viewport": {"width": 640, "height": 400}, "device_scale_factor": 2}),
])
def test_every_control_fits_the_width_at_360_px_and_200_percent_zoom(browser, server_url, name, options):
    with fresh_page(browser, **options) as page:
        width = options["viewport"]["width"]
        open_playground(page, server_url)
        train(page, "tiny", 5)
        page.wait_for_function("window.playground.saved.length > 0")
        page.fill("#prompt", "ROMEO:\nBut soft, what light through yonder window breaks")
        sample(page, 80)
        show_attention(page)
        for source in ["paste", "file", "hf", "shakespeare"]:  # every corpus panel, the last one left open
            page.select_option("#corpus-source", source)
            wide = page.evaluate(OVERFLOWING)
            assert wide == [], f"{source}: {wide}"
        controls = page.evaluate(CONTROLS)
        outside = [c for c in controls if (c["right"] > width + 0.5 or c["left"] < -0.5) and not c["inBox"]]
        scrolled = [c["id"] for c in controls if c["right"] > width + 0.5 and c["inBox"]]
        card = page.evaluate("""(() => { const tr = document.querySelector('#checkpoints tbody tr');
          const r = tr.getBoundingClientRect();
          return {display: getComputedStyle(tr).display, width: r.width, head: getComputedStyle(
            document.querySelector('#checkpoints thead')).display,
            labels: [...tr.cells].map((td) => td.dataset.label),
            columns: [...document.querySelectorAll('#checkpoints thead th')]
              .map((th) => th.textContent.trim())}; })()""")
        print(f"\n{name}: page {page.evaluate('document.documentElement.scrollWidth')} px wide for {width}; "
              f"{len(controls)} controls, outside the width: {outside}, reached by scrolling their own box: "
              f"{scrolled}; saved model: {card}")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        assert page.evaluate(OVERFLOWING) == [] and outside == []
        # the saved model is a card: its row a block with each value labelled by its column's name
        assert card["display"] == "block" and card["head"] == "none" and card["width"] <= width
        assert card["labels"] == card["columns"] and {"Model", "Step", "Loss"} <= set(card["labels"])
        for button in page.locator("#checkpoints tbody tr").first.locator("button").all():
            b = button.bounding_box()
            assert b["x"] >= 0 and b["x"] + b["width"] <= width, button.inner_text()
        print(f"screenshot {screenshot(page, f'workspace_{name}')}")
        page.locator("#saved").screenshot(path=str(SCREENSHOTS / f"workspace_{name}_saved_cards.png"))
        page.locator("#sample").screenshot(path=str(SCREENSHOTS / f"workspace_{name}_sample.png"))


def test_the_dark_theme_covers_the_page_and_the_heatmap(browser, server_url):
    with fresh_page(browser, viewport={"width": 1440, "height": 900}, color_scheme="dark") as page:
        open_playground(page, server_url)
        train(page, "tiny", 20)
        page.fill("#prompt", "ROMEO:\nBut soft")
        sample(page)
        show_attention(page)
        # any element painted light in the dark theme (a white card, field or canvas) is a hole in it
        light = page.evaluate("""() => [...document.querySelectorAll('body, body *')].filter((e) => {
            const c = getComputedStyle(e).backgroundColor, m = c.match(/[\\d.]+/g);
            if (!m || (m.length > 3 && Number(m[3]) === 0)) return false;
            const [r, g, b] = m.map(Number);
            return 0.2126 * r + 0.7152 * g + 0.0722 * b > 128;
          }).map((e) => e.id || e.className || e.tagName)""")
        # the heatmap's pixels: its empty corner, a masked cell (upper right) and a visible cell (lower left)
        pixels = page.evaluate("""(() => { const c = document.getElementById('attention-canvas');
            const g = c.getContext('2d'), s = c.width / c.clientWidth, {cell, T} = window.playground.attentionLayout;
            const at = (x, y) => Array.from(g.getImageData(Math.round(x * s), Math.round(y * s), 1, 1).data);
            return {corner: at(4, 4), masked: at(40 + (T - 1) * cell + cell / 2, 40 + cell / 2),
                    lowest: at(40 + cell / 2, 40 + (T - 1) * cell + cell / 2)}; })()""")
        legend = page.evaluate("""(() => { const s = getComputedStyle(document.querySelector('.heat-ramp'));
            return {image: s.backgroundImage, masked: getComputedStyle(document.querySelector('.heat-masked'))
            .backgroundColor}; })()""")
        print(f"\ndark: light-painted elements {light}; heatmap pixels {pixels}; legend {legend}")
        assert light == []
        lum = {k: 0.2126 * p[0] + 0.7152 * p[1] + 0.0722 * p[2] for k, p in pixels.items()}
        # a canvas pixel the page did not paint is transparent: the box behind it is the theme's dark card
        assert pixels["corner"][3] == 0 or lum["corner"] < 60
        assert lum["masked"] < 90 and lum["lowest"] < 120, lum
        assert "linear-gradient" in legend["image"] and luminance(legend["masked"]) < 0.35
        page.locator("#inside").scroll_into_view_if_needed()
        print(f"screenshots {screenshot(page, 'workspace_dark')} {viewport_shot(page, 'workspace_dark_heatmap')}")
        for path in ["learn", "format", "performance", "lab/"]:  # the docs pages follow the reader's theme too
            page.goto(f"{server_url}/{path}")
            bg = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
            print(f"/{path}: background {bg}")
            assert luminance(bg) < 0.1
        viewport_shot(page, "workspace_dark_docs_lab")


def test_a_long_prompts_heatmap_is_readable_and_scrolls(server_url, page):
    """The demo model (large, context 128): a 181-byte prompt gives its last 128 bytes as rows and columns."""
    open_playground(page, server_url)
    page.select_option("#backend", "wasm")
    page.click("#load-demo")
    page.wait_for_function("window.playground.loaded?.source === 'demo'")
    prompt = ("ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun.\n"
              "Arise, fair sun, and kill the envious moon, who is already sick and pale with grief.")
    page.fill("#prompt", prompt)
    show_attention(page)
    layout = page.evaluate("window.playground.attentionLayout")
    scroll = page.evaluate("""(() => { const b = document.getElementById('attention-scroll');
      return {client: b.clientWidth, scroll: b.scrollWidth, height: b.clientHeight, left: b.scrollLeft}; })()""")
    print(f"\n{len(prompt.encode())}-byte prompt: {layout}; scroll box {scroll}")
    assert layout["T"] == 128 and layout["cell"] >= 14 and layout["labelEvery"] == 1 and layout["font"] == 12
    assert scroll["scroll"] > scroll["client"], "a 128-byte grid of readable cells scrolls in its box"
    assert page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]
    page.locator("#inside").scroll_into_view_if_needed()
    print(f"screenshot {viewport_shot(page, 'workspace_heatmap_long_prompt')}")

    # the keyboard walks the grid and the box follows the cell in focus
    page.focus("#attention-canvas")
    for _ in range(120):
        page.keyboard.press("ArrowLeft")
    after = page.evaluate("document.getElementById('attention-scroll').scrollLeft")
    cell = page.locator("#attention-cell").inner_text()
    print(f"after 120 × ArrowLeft: {cell!r}, scrollLeft {after}")
    assert cell.startswith("query 127 ") and " → key 7 " in cell
    assert after < scroll["scroll"] - scroll["client"], "the box did not follow the focus to the left"

    page.select_option("#attention-zoom", "fit")  # the whole grid at once: no scrolling, smaller cells
    fit = page.evaluate("window.playground.attentionLayout")
    widths = page.evaluate("""(() => { const b = document.getElementById('attention-scroll');
      return [b.clientWidth, b.scrollWidth]; })()""")
    print(f"fit the width: {fit}; scroll box {widths}")
    assert fit["cell"] < layout["cell"] and widths[1] <= widths[0] + 1
    page.locator("#inside").screenshot(path=str(SCREENSHOTS / "workspace_heatmap_fit.png"))
    assert page.errors == []


def test_first_load_is_small_and_train_works_within_two_seconds(browser, server_url):
    with fresh_page(browser) as page:
        cdp = page.context.new_cdp_session(page)
        cdp.send("Network.enable")
        urls, sizes = {}, {}
        cdp.on("Network.requestWillBeSent", lambda e: urls.__setitem__(e["requestId"], e["request"]["url"]))
        cdp.on("Network.loadingFinished", lambda e: sizes.__setitem__(e["requestId"], e["encodedDataLength"]))
        t0 = time.monotonic()
        page.goto(server_url)
        # usable: the browser's features known, the Train button on, the preset's needs shown
        page.wait_for_function("document.querySelectorAll('#features li').length >= 6 && "
                               "!document.getElementById('start').disabled && "
                               "/parameters/.test(document.getElementById('preset-info').textContent)")
        usable = time.monotonic() - t0
        page.wait_for_load_state("networkidle")
        total = sum(sizes.values())
        biggest = sorted(((n, urls.get(k, k).split("/", 3)[-1]) for k, n in sizes.items()), reverse=True)[:5]
        print(f"\nfirst load: {total:,} bytes over {len(sizes)} requests (largest {biggest}); "
              f"Train usable after {usable * 1000:.0f} ms")
        assert total <= 1_000_000 and usable <= 2.0
