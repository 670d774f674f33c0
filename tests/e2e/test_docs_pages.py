"""The docs pages as a reader meets them: from the playground's header to each page and back, the
performance chart drawn and its PNG plots loaded, a link between docs landing on its heading, the
contents list at the top of a long page, the lab notebook one click from the performance page with its
charts and plots, the reader's dark theme on every page (charts included), nothing wider than a phone's
screen, titles without Markdown in them, and the styled 404 page; a screenshot of each for a human to
look at."""
from __future__ import annotations

import contextlib
import re

import pytest

from e2e.page_actions import ROOT, SCREENSHOTS, open_playground, screenshot, watched

# Every kind of docs page: the header's, the long ones, the lab's index and an investigation with charts
DOCS_PATHS = ["learn", "format", "performance", "architecture", "determinism", "lab/",
              "lab/2026-12-01-every-h200-curve"]

HEADER_LINKS = [("How it learns", "learn", "How a byte-level GPT learns"),
                ("File format", "format", "The `.tinygpt` file, version 2"),
                ("Performance", "performance", "Performance")]


@pytest.mark.parametrize("label,path,heading", HEADER_LINKS)
def test_header_link_to_docs_page_and_back(page, server_url, label, path, heading):
    open_playground(page, server_url)
    page.click(f"header nav >> text={label}")
    page.wait_for_url(f"{server_url}/{path}")
    assert page.locator("article.doc h1").inner_text() == heading.replace("`", "")
    assert page.locator("nav a[aria-current=page]").inner_text() == label
    # The stylesheet loaded (relative link from /<path>): the nav is laid out as a flex row.
    assert page.evaluate("getComputedStyle(document.querySelector('.site-header nav')).display") == "flex"
    print(f"\n{label}: /{path}, h1 {heading!r}, screenshot {screenshot(page, f'docs_{path}')}")
    page.click("text=TinyGPT playground")
    page.wait_for_url(f"{server_url}/")
    page.wait_for_selector("#train-form")
    assert page.errors == []


def test_performance_chart_is_drawn(page, server_url):
    page.goto(f"{server_url}/performance")
    charts = page.locator("svg.bench-chart")
    assert charts.count() == (ROOT / "docs" / "performance.md").read_text().count("<!-- bench-chart:")
    charts.first.scroll_into_view_if_needed()
    for i in range(charts.count()):
        chart = charts.nth(i)
        assert chart.is_visible()
        box = chart.bounding_box()
        lines = chart.locator("polyline.series").count()
        labels = chart.locator("text.series-label").all_text_contents()
        print(f"\nchart {i}: {chart.locator('title').first.text_content()!r}, "
              f"{box['width']:.0f}x{box['height']:.0f} px, {lines} lines: {labels}")
        assert lines == len(labels) >= 2 and box["width"] > 300
        # every title, label and tick inside the chart: an SVG clips what lies past its viewBox
        outside = chart.evaluate("""svg => { const b = svg.getBoundingClientRect();
          return [...svg.querySelectorAll('text')].filter((t) => { const r = t.getBoundingClientRect();
            return r.left < b.left - 1 || r.right > b.right + 1 || r.top < b.top - 1 || r.bottom > b.bottom + 1; })
            .map((t) => t.textContent); }""")
        assert outside == [], f"chart {i}: text past its edges: {outside}"
    for i in range(charts.count()):
        path = SCREENSHOTS / f"docs_performance_chart_{i}.png"
        charts.nth(i).screenshot(path=str(path))
        print(f"chart screenshot {path}")


def test_performance_plots_load(page, server_url):
    """Each image link of performance.md (the PNGs of `tinygpt bench --all` in docs/bench) shows a picture."""
    text = re.sub(r"<!--.*?-->", "", (ROOT / "docs" / "performance.md").read_text(), flags=re.S)  # not shown
    links = re.findall(r"!\[[^\]]*\]\((bench/[^)]+\.png)\)", text)
    page.goto(f"{server_url}/performance")
    images = page.locator("article.doc img")
    sizes = [images.nth(i).evaluate("img => img.decode().then(() => [img.naturalWidth, img.naturalHeight])")
             for i in range(images.count())]
    print(f"\n{len(links)} plots linked: {list(zip(links, sizes))}")
    assert images.count() == len(links) and all(w > 0 and h > 0 for w, h in sizes)
    assert page.errors == []


def test_link_between_docs_lands_on_the_page(page, server_url):
    page.goto(f"{server_url}/learn")
    page.click("article.doc >> text=the performance page")
    page.wait_for_url(f"{server_url}/performance")
    page.goto(f"{server_url}/learn")
    page.click("article.doc >> text=.tinygpt format")
    page.wait_for_url(f"{server_url}/format")
    assert page.locator("#header-keys").count() == 1  # GitHub-style anchors, so format.md#header-keys resolves


def test_missing_page_is_the_styled_404(page, server_url):
    response = page.goto(f"{server_url}/no/such/page")
    assert response.status == 404
    assert response.headers["cross-origin-embedder-policy"] == "require-corp"
    assert page.locator("h1").inner_text() == "Nothing here"
    assert page.locator("#missing-path").inner_text() == "/no/such/page"
    assert page.evaluate("getComputedStyle(document.querySelector('.site-header nav')).display") == "flex"
    print(f"\n404: {screenshot(page, 'docs_404')}")
    page.click("text=Go to the playground")
    page.wait_for_url(f"{server_url}/")


@contextlib.contextmanager
def fresh_page(browser, **options):
    """A page in a new browser context with `options` (a colour scheme, a viewport), watched as the
    `page` fixture's is."""
    context = browser.new_context(**options)
    try:
        p = watched(context.new_page())
        yield p
        assert p.errors == [] and p.csp_violations == [], (p.errors, p.csp_violations)
    finally:
        context.close()


def luminance(css_colour: str) -> float:
    """Relative luminance (0 black … 1 white) of a computed colour, "rgb(r, g, b)" or "rgba(…)"."""
    r, g, b = (int(v) / 255 for v in re.findall(r"[\d.]+", css_colour)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize("path", ["performance", "architecture", "learn", "format", "lab/",
                                  "lab/2026-11-25-wgsl-step-vs-pytorch"])
def test_contents_list_links_to_every_section(page, server_url, path):
    page.goto(f"{server_url}/{path}")
    contents = page.locator("article.doc nav.contents")
    hrefs = contents.locator("a").evaluate_all("links => links.map((a) => a.getAttribute('href'))")
    sections = page.locator("article.doc h2").evaluate_all("hs => hs.map((h) => '#' + h.id)")
    landing = page.evaluate("""hrefs => hrefs.filter((h) => !/^H[23]$/.test(
        document.getElementById(decodeURIComponent(h.slice(1)))?.tagName ?? ''))""", hrefs)
    above = page.evaluate("""() => document.querySelector('nav.contents').getBoundingClientRect().bottom
        <= document.querySelector('article.doc h2').getBoundingClientRect().top""")
    print(f"\n/{path}: {len(hrefs)} contents entries for {len(sections)} sections; not landing on a heading: {landing}")
    assert hrefs and landing == [] and set(sections) <= set(hrefs) and above
    # a reader clicks the last entry: the address names it and its heading is on screen
    contents.locator("a").last.click()
    page.wait_for_function("h => location.hash === h", arg=hrefs[-1])
    top = page.evaluate("id => document.getElementById(id).getBoundingClientRect().top", hrefs[-1][1:])
    assert -2 <= top < page.viewport_size["height"], top  # scrolled to it, give or take a sub-pixel
    if path == "performance":
        page.evaluate("window.scrollTo(0, 0)")
        print(f"screenshot {screenshot_viewport(page, 'docs_performance_contents')}")
    assert page.errors == []


def screenshot_viewport(page, name: str):
    """The visible part only: a full-page picture of a long page is too tall to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def test_lab_page_from_the_performance_page_draws_its_charts_and_plots(page, server_url):
    page.goto(f"{server_url}/performance")
    page.locator("article.doc a[href='lab/']").first.click()
    page.wait_for_url(f"{server_url}/lab/")
    assert page.locator("article.doc h1").inner_text() == "The lab notebook"
    name = "2026-11-28-decoding-on-the-cpu"
    page.locator(f"article.doc a[href='{name}']").first.click()
    page.wait_for_url(f"{server_url}/lab/{name}")
    text = re.sub(r"<!--(?! bench-chart).*?-->", "", (ROOT / "docs" / "lab" / f"{name}.md").read_text(), flags=re.S)
    markers = text.count("<!-- bench-chart:")
    plots = re.findall(r"!\[[^\]]*\]\((\.\./bench/[^)]+\.png)\)", text)
    charts = page.locator("svg.bench-chart")
    images = page.locator("article.doc img")
    sizes = [images.nth(i).evaluate("img => img.decode().then(() => [img.naturalWidth, img.naturalHeight])")
             for i in range(images.count())]
    print(f"\n/lab/{name}: {charts.count()} charts for {markers} markers, {len(sizes)} plots {sizes}")
    assert charts.count() == markers >= 1 and images.count() == len(plots) >= 1
    assert all(w > 0 and h > 0 for w, h in sizes)
    # the site's stylesheet and links resolve from one folder down
    assert page.evaluate("getComputedStyle(document.querySelector('.site-header nav')).display") == "flex"
    charts.first.scroll_into_view_if_needed()
    print(f"screenshot {screenshot_viewport(page, 'docs_lab_page')}")
    page.click("header nav >> text=Performance")
    page.wait_for_url(f"{server_url}/performance")
    assert page.errors == []


def test_machine_lines_name_the_charts_machines(page, server_url):
    """Above each host's figures, the machine as the chart of the same run names it in its header."""
    page.goto(f"{server_url}/performance")
    machines = page.locator("p.bench-machine").all_inner_texts()
    devices = page.locator("svg.bench-chart > title").evaluate_all(
        "ts => ts.map((t) => t.textContent.split(' — ').slice(1).join(' — '))")
    print(f"\nmachine lines: {machines}\nchart devices: {devices}")
    assert machines and devices
    assert all(any(device in line for line in machines) for device in devices)


def test_docs_pages_follow_a_dark_theme(browser, server_url):
    with fresh_page(browser, color_scheme="dark") as page, fresh_page(browser, color_scheme="light") as light:
        for path in [*DOCS_PATHS, "no/such/page"]:
            themes = []
            for p in (page, light):
                p.goto(f"{server_url}/{path}")
                themes.append(p.evaluate("""() => { const s = getComputedStyle(document.documentElement);
                    const link = document.querySelector('article.doc a')
                        ?? document.querySelector('header nav a:not(.home)');
                    return [s.backgroundColor, s.color, getComputedStyle(link).color]; }"""))
            (bg, fg, link), (light_bg, light_fg, _) = themes
            print(f"\n/{path}: dark {bg} / {fg} (links {link}), light {light_bg} / {light_fg}")
            assert luminance(bg) < 0.1 and luminance(fg) > 0.7 and luminance(link) > 0.4
            assert luminance(light_bg) > 0.9 and luminance(light_fg) < 0.2
        page.goto(f"{server_url}/performance")
        charts = page.locator("svg.bench-chart")
        for i in range(charts.count()):
            colours = charts.nth(i).evaluate("""svg => {
                const c = (sel, p) => getComputedStyle(svg.querySelector(sel))[p];
                return { background: getComputedStyle(svg).backgroundColor, title: c('.chart-title', 'fill'),
                         tick: c('text.tick', 'fill'), grid: c('.grid', 'stroke'),
                         lines: [...svg.querySelectorAll('polyline.series')].map((l) => getComputedStyle(l).stroke) };
            }""")
            print(f"chart {i}: {colours}")
            assert luminance(colours["background"]) < 0.15
            assert luminance(colours["title"]) > 0.6 and luminance(colours["tick"]) > 0.6
            assert luminance(colours["grid"]) < 0.3
            assert all(luminance(c) > 0.15 for c in colours["lines"])  # no line vanishes into the background
        print(f"screenshot {screenshot_viewport(page, 'docs_performance_dark')}")
        charts.last.screenshot(path=str(SCREENSHOTS / "docs_performance_chart_dark.png"))
        page.goto(f"{server_url}/lab/")
        print(f"screenshot {screenshot_viewport(page, 'docs_lab_index_dark')}")


@pytest.mark.parametrize("path", DOCS_PATHS)
def test_docs_pages_fit_a_phone_screen(browser, server_url, path):
    """At 360 px nothing widens the page: wide tables scroll inside their own box, charts scale down."""
    with fresh_page(browser, viewport={"width": 360, "height": 740}) as page:
        page.goto(f"{server_url}/{path}")
        page.wait_for_load_state("load")
        widths = page.evaluate("""() => {
            const all = (sel) => [...document.querySelectorAll(sel)];
            return { page: document.documentElement.scrollWidth, screen: innerWidth,
                     scrolling_tables: all('article.doc table').filter((t) => t.scrollWidth > t.clientWidth).length,
                     widest: Math.max(0, ...all('article.doc > *').map((e) => e.getBoundingClientRect().right)),
                     charts: all('svg.bench-chart').map((s) => Math.round(s.getBoundingClientRect().width)) };
        }""")
        print(f"\n/{path} at 360 px: {widths}")
        assert widths["page"] <= widths["screen"] and widths["widest"] <= widths["screen"]
        assert all(w <= widths["screen"] for w in widths["charts"])
        if path == "performance":
            page.locator("article.doc table").nth(1).scroll_into_view_if_needed()
            print(f"screenshot {screenshot_viewport(page, 'docs_performance_360px')}")
            page.locator("svg.bench-chart").first.scroll_into_view_if_needed()
            print(f"screenshot {screenshot_viewport(page, 'docs_performance_360px_chart')}")


def test_format_title_shows_no_backticks(page, server_url):
    page.goto(f"{server_url}/format")
    title = page.title()
    h1 = page.locator("article.doc h1")
    print(f"\n/format: <title> {title!r}, h1 {h1.inner_text()!r} with code {h1.locator('code').inner_text()!r}")
    assert title == "The .tinygpt file, version 2 · TinyGPT"
    assert h1.inner_text() == "The .tinygpt file, version 2" and h1.locator("code").inner_text() == ".tinygpt"
