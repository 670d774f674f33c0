"""How docs/*.md and the lab notebook (docs/lab/*.md) become pages (server/docs_pages.py): a title without
Markdown in it, a contents list of the page's sections, links between docs files that stay relative as the
site mirrors the folder, the lab served at /lab/ with its charts and plots, machine lines drawn from the
same benchmark files as the charts, and the static build writing every lab page. Also what the docs
promise a reader: the performance page is today's figures only, and every § of the old notebook is
findable in the lab."""
from __future__ import annotations

import json
import re
import shutil
import urllib.error
import urllib.request

import pytest

from conftest import ROOT
from support.server_process import running_server

DOCS = ROOT / "docs"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)


def fetch(url: str):
    """(status, headers, body) without following redirects, so a redirect's own answer is seen."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    try:
        with urllib.request.build_opener(NoRedirect).open(url, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def render(name: str, docs=DOCS) -> str:
    from server.app import template_env
    from server.docs_pages import render_doc

    return render_doc(template_env(), name, docs)


def write_docs(tmp_path, files: dict[str, str]):
    """A docs/ folder of `files` (path → text) with the real docs/bench beside them."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS / "bench", docs / "bench")
    for path, text in files.items():
        (docs / path).parent.mkdir(parents=True, exist_ok=True)
        (docs / path).write_text(text)
    return docs


def test_a_title_in_code_is_plain_text_in_the_title_and_code_in_the_h1():
    html = render("format")
    title = re.search(r"<title>(.*?)</title>", html)[1]
    h1 = re.search(r"<h1[^>]*>(.*?)</h1>", html)[1]
    print(f"\n<title>{title}</title>, <h1>{h1}</h1>")
    assert title == "The .tinygpt file, version 2 · TinyGPT"
    assert h1 == "The <code>.tinygpt</code> file, version 2"


@pytest.mark.parametrize("name", ["performance", "architecture", "learn", "format", "determinism", "lab/README",
                                  "lab/2026-11-25-wgsl-step-vs-pytorch", "lab/2026-11-22-wasm-builds"])
def test_long_pages_open_with_a_contents_list_of_their_sections(name):
    html = render(name)
    contents = re.search(r'<nav class="contents".*?</nav>', html, re.S)
    assert contents, f"{name}: no contents list"
    links = re.findall(r'href="#([^"]+)"', contents[0])
    ids = re.findall(r'<h[23] id="([^"]+)"', html)
    h2 = re.findall(r'<h2 id="([^"]+)"', html)
    print(f"\n{name}: {len(links)} entries for {len(h2)} sections, first {links[:3]}")
    assert links and set(links) <= set(ids)  # every entry lands on a heading
    assert set(h2) <= set(links)             # and every section is listed
    # at the top: before the first section, after the title
    assert html.index("<h1") < html.index('<nav class="contents"') < html.index("<h2")


def test_a_page_of_one_section_lists_its_subsections_and_a_short_page_none(tmp_path):
    docs = write_docs(tmp_path, {
        "lab/README.md": "# Index\n\n## Only\n\n### One\n\n### Two\n\ntext\n",
        "lab/short.md": "# Short\n\n## A\n\n## B\n\ntext\n",
    })
    nested = render("lab/README", docs)
    short = render("lab/short", docs)
    print(f"\none section: {re.search(r'<nav class=.contents.*?</nav>', nested)[0]}")
    assert '<li><a href="#only">Only</a><ol><li><a href="#one">One</a></li><li><a href="#two">Two</a>' in nested
    assert 'class="contents"' not in short  # two sections fit on a screen


def test_the_contents_marker_places_the_list(tmp_path):
    docs = write_docs(tmp_path, {
        "performance.md": "# P\n\nIntro.\n\n<!-- contents -->\n\nMore intro.\n\n## A\n\n## B\n\n## C `code`\n"})
    html = render("performance", docs)
    print(f"\n{re.search(r'<article.*?<h2', html, re.S)[0]}")
    assert html.index("Intro.") < html.index('<nav class="contents"') < html.index("More intro.")
    assert '<a href="#c-code">C <code>code</code></a>' in html and "<!-- contents -->" not in html


@pytest.mark.parametrize("folder,href,page", [
    ("", "format.md#header-keys", "format#header-keys"),
    ("", "lab/README.md", "lab/"),
    ("", "lab/x.md#y", "lab/x#y"),
    ("lab", "x.md", "x"),
    ("lab", "README.md#paths-then-and-now", "./#paths-then-and-now"),
    ("lab", "../performance.md#goals", "../performance#goals"),
    ("lab", "../lab/x.md", "../lab/x"),
    ("", "demo_model.md", None),   # a docs file that is not a page: GitHub's link is left as it is
    ("lab", "nope.md", None),
    ("", "https://example.com/a.md", None),
])
def test_links_between_docs_files_become_the_same_relative_links_to_pages(tmp_path, folder, href, page):
    from server.docs_pages import page_href

    docs = write_docs(tmp_path, {"lab/README.md": "# I\n", "lab/x.md": "# X\n", "format.md": "# F\n",
                                 "performance.md": "# P\n", "demo_model.md": "# D\n"})
    got = page_href(href, folder, docs)
    print(f"\nin docs/{folder or '.'}: {href} -> {got}")
    assert got == page


def test_a_lab_page_draws_its_charts_and_links_its_plots_one_folder_up():
    name = "2026-11-28-decoding-on-the-cpu"
    text = (DOCS / "lab" / f"{name}.md").read_text()
    html = render(f"lab/{name}")
    markers = re.findall(r"<!-- bench-chart: ([\w.-]+) -->", text)
    images = re.findall(r'<img src="([^"]+)"', html)
    print(f"\n/lab/{name}: {len(markers)} charts {markers}, images {images}")
    assert markers and html.count('<svg class="bench-chart"') == len(markers)
    assert images and all(src.startswith("../bench/") and (DOCS / src[3:]).is_file() for src in images)
    assert 'href="../static/css/docs.css"' in html and 'href="../performance"' in html  # the site, one folder up
    assert "<code>docs/lab/2026-11-28-decoding-on-the-cpu.md</code>" in html  # the footer names the source


def test_a_lab_page_linking_a_missing_plot_fails_to_render(tmp_path):
    docs = write_docs(tmp_path, {"lab/a.md": "# A\n\n![plot](../bench/none.png)\n"})
    with pytest.raises(FileNotFoundError, match="none.png"):
        render("lab/a", docs)


def test_machine_lines_come_from_the_chart_files():
    """The performance page's machine facts are each benchmark file's `device`, as its chart's header."""
    html = render("performance")
    lines = re.findall(r'<p class="bench-machine">(.*?)</p>', html, re.S)
    names = re.findall(r"<!-- bench-machine: ([\w.-]+) -->", (DOCS / "performance.md").read_text())
    print(f"\n{len(lines)} machine lines: {names}")
    assert len(lines) == len(names) >= 3
    for line, name in zip(lines, names):
        data = json.loads((DOCS / "bench" / name).read_text())
        print(f"  {name}: {data['device']}")
        assert data["device"].replace("'", "&#x27;") in line and name in line


def test_the_performance_page_types_no_machine_facts_of_its_own():
    """CPU flags and browser versions are the benchmark files' (the machine lines), never typed beside them,
    where they could contradict the charts' headers."""
    text = (DOCS / "performance.md").read_text()
    typed = re.findall(r"AVX[-\w]*|AMX|Chromium \d{3}\b[\d.]*|(?:Node|PyTorch|torch|driver) v?\d+\.\d+\.\d+", text)
    print(f"\nmachine facts typed in performance.md: {typed}")
    assert typed == []


def test_the_performance_page_is_todays_figures():
    text = (DOCS / "performance.md").read_text()
    lines = text.count("\n")
    charts = re.findall(r"<!-- bench-chart: ([\w.-]+) -->", text)
    plots = re.findall(r"\]\((bench/[\w.-]+\.png)\)", text)
    print(f"\nperformance.md: {lines} lines, charts {charts}, plots {plots}")
    assert lines <= 800
    assert "<!-- suite-figures -->" in text and "## The test suite" in text
    assert "(lab/README.md)" in text  # the lab is one click away
    dated = [re.match(r"(cpu|gpu-h\d+)-[\w]*?-?(\d{4}-\d\d-\d\d)", p.name) for p in (DOCS / "bench").glob("*.json")]
    newest = {}
    for m in filter(None, dated):  # the last date each kind of machine was measured on
        newest[m[1]] = max(newest.get(m[1], ""), m[2])
    for name in charts:  # no superseded run is drawn
        m = re.match(r"(cpu|gpu-h\d+)-[\w]*?-?(\d{4}-\d\d-\d\d)", name)
        assert m[2] == newest[m[1]], f"{name}: {m[1]} was measured again on {newest[m[1]]}"
    assert all((DOCS / p).is_file() for p in plots)


def test_every_section_of_the_old_notebook_is_in_the_lab_index():
    """§1–47 each in the file the index names; investigations since then have files of their own."""
    index = (DOCS / "lab" / "README.md").read_text()
    rows = dict(re.findall(r"^\| (\d+) \| \[([\w.-]+\.md)\]", index, re.M))
    print(f"\n{len(rows)} sections in {len(set(rows.values()))} lab files")
    assert sorted(map(int, rows)) == list(range(1, 48))
    for number, file in rows.items():
        assert re.search(rf"^## §{number}\. ", (DOCS / "lab" / file).read_text(), re.M), f"§{number} not in {file}"
    files = {p.name for p in (DOCS / "lab").glob("2026-*.md")}
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    assert set(rows.values()) <= files and files <= linked  # no lab file is left out of the index


def test_every_markdown_link_of_the_docs_names_a_file_that_exists():
    """Relative links work on GitHub (files) as they do on the pages: each names a file of the repository."""
    broken = []
    for md in [*DOCS.glob("*.md"), *(DOCS / "lab").glob("*.md")]:
        text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
        for href in re.findall(r"\]\(([^)\s]+)\)", text):
            path = href.split("#")[0]
            if path and "://" not in path and not (md.parent / path).exists():
                broken.append(f"{md.relative_to(ROOT)}: {href}")
    print(f"\nbroken links: {broken}")
    assert broken == []


def test_charts_name_no_colour_but_their_lines():
    """Text, grid and background follow the page's theme (docs.css), so a chart reads in dark mode too."""
    from server.bench_chart import bench_svg, load_bench

    svg = bench_svg(load_bench(DOCS / "bench" / "gpu-h200-2026-12-01.json"))
    coloured = re.findall(r'<(\w+) class="([\w-]+)"[^>]* (?:fill|stroke)="(#[0-9a-f]+|currentColor)"', svg)
    print(f"\nelements with a colour of their own: {sorted({(tag, cls) for tag, cls, _ in coloured})}")
    assert {cls for _, cls, _ in coloured} <= {"series", "series-label"}
    assert "#000000" not in svg  # black would vanish on a dark background: the text colour instead
    css = (ROOT / "site/static/css/docs.css").read_text()
    assert "prefers-color-scheme: dark" in css and "var(--chart-bg)" in css


@pytest.fixture(scope="module")
def server_url():
    with running_server() as url:
        yield url


def test_the_lab_is_served_at_lab(server_url):
    from server.docs_pages import lab_names

    name = lab_names()[0]
    answers = {path: fetch(server_url + path) for path in ("/lab", "/lab/", f"/lab/{name}", "/lab/nope", "/lab/x.md")}
    for path, (status, headers, _) in answers.items():
        print(f"\n{path}: {status} {headers.get('Location', '')}")
    assert answers["/lab"][0] == 308 and answers["/lab"][1]["Location"] == "/lab/"
    assert answers["/lab/"][0] == 200 and "<h1" in answers["/lab/"][2] and f'href="{name}"' in answers["/lab/"][2]
    assert answers[f"/lab/{name}"][0] == 200 and 'href="../static/css/docs.css"' in answers[f"/lab/{name}"][2]
    assert answers["/lab/nope"][0] == 404 and answers["/lab/x.md"][0] == 404
    status, _, performance = fetch(server_url + "/performance")
    assert status == 200 and 'href="lab/"' in performance  # linked from the performance page


def test_the_static_build_writes_the_lab_where_its_links_point(tmp_path):
    from server.cli import write_docs_pages
    from server.docs_pages import lab_names

    out = tmp_path / "dist"
    out.mkdir()
    write_docs_pages(out)
    written = sorted(p.relative_to(out).as_posix() for p in (out / "lab").glob("*.html"))
    print(f"\n{len(written)} lab pages written: {written[:3]}…")
    assert written == sorted(["lab/index.html", *(f"lab/{n}.html" for n in lab_names())])
    index = (out / "lab" / "index.html").read_text()
    for href in set(re.findall(r'<a href="([\w-]+)"', index)):  # /lab/<name> is served from lab/<name>.html
        assert (out / "lab" / f"{href}.html").is_file(), href
    page = (out / "lab" / "2026-12-01-every-h200-curve.html").read_text()
    for src in re.findall(r'<img src="\.\./(bench/[\w.-]+\.png)"', page):  # one folder up, where build copied them
        assert (out / src).is_file(), src
    assert '<svg class="bench-chart"' in page


def every_page() -> list[str]:
    from server.docs_pages import PAGES, lab_names

    return [*PAGES, "lab/README", *(f"lab/{name}" for name in lab_names())]


def test_pages_link_pages_and_carry_no_inline_style():
    """Every link between docs became a link between pages (none to a .md file, which the site does not
    serve), and no element carries a style attribute, which the Content-Security-Policy refuses."""
    found = {}
    for name in every_page():
        html = render(name)
        md_links = [h for h in re.findall(r'href="([^"]+)"', html) if re.search(r"\.md(#|$)", h)]
        styles = re.findall(r'<\w+[^>]* style="[^"]*"', html)
        if md_links or styles:
            found[name] = (md_links, styles[:3])
    print(f"\n{len(every_page())} pages; links to .md files or inline styles: {found}")
    assert found == {}
