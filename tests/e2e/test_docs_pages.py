"""The docs pages as a reader meets them: from the playground's header to each page and back, the
performance chart drawn and its PNG plots loaded, a link between docs landing on its heading, and
the styled 404 page; a screenshot of each for a human to look at."""
from __future__ import annotations

import re

import pytest

from e2e.page_actions import ROOT, SCREENSHOTS, open_playground, screenshot

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
