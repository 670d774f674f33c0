"""The docs pages (/learn, /format, /performance, …, and the lab notebook at /lab/): docs/<name>.md and
docs/lab/<name>.md rendered to HTML with markdown-it (CommonMark + tables, the dialect the files are written
in for GitHub) inside site/templates/docs.html.

The site's paths mirror the folder: docs/X.md is served at /X, docs/lab/Y.md at /lab/Y and docs/lab/README.md
at /lab/. So a link between docs files (`format.md#header-keys`, `lab/README.md`, `../performance.md`) becomes
the same relative link without `.md` (a README becomes its folder), and resolves on the dev server, in the
static build and on GitHub alike. Headings get GitHub's anchor ids so fragments resolve; a page of several
sections gets a contents list of them. Three markers draw on the benchmark files of docs/bench:
`<!-- bench-chart: FILE.json -->` becomes the file's SVG chart, `<!-- bench-machine: FILE.json -->` the line
naming its machine (so a page's machine facts are the chart's, never typed twice), and `<!-- contents -->`
says where the contents list goes (else before the first section). An image link to a PNG of docs/bench
(`![…](bench/FILE.png)`, `../bench/FILE.png` from the lab, as GitHub resolves them beside the file) is served
at /bench/FILE.png (bench_images), so the same relative link works on the pages."""
from __future__ import annotations

import functools
import posixpath
import re
from html import escape, unescape
from pathlib import Path

from jinja2 import Environment
from markdown_it import MarkdownIt

from server.bench_chart import bench_svg, load_bench
from server.headers import ROOT

DOCS = ROOT / "docs"
# Page name (its URL path and docs/<name>.md) → its label in the navigation, in navigation order.
# The first three are the playground header's links; the last two are what learn.md points to for depth.
PAGES = {
    "learn": "How it learns",
    "format": "File format",
    "performance": "Performance",
    "architecture": "Architecture",
    "determinism": "Determinism",
}
LAB = "lab"            # docs/lab/<name>.md is served at /lab/<name>
LAB_INDEX = "README"   # docs/lab/README.md, the notebook's index, at /lab/
CHART_MARKER = re.compile(r"<!--\s*bench-chart:\s*([\w.-]+\.json)\s*-->")
MACHINE_MARKER = re.compile(r"<!--\s*bench-machine:\s*([\w.-]+\.json)\s*-->")
CONTENTS_MARKER = re.compile(r"<!--\s*contents\s*-->\n?")
BENCH_IMAGE = re.compile(r'<img src="(?:\.\./)*bench/([\w.-]+\.png)"')
DOC_LINK = re.compile(r"^(?P<path>(?:\.{1,2}/)*(?:[\w-]+/)*[\w-]+)\.md(?P<fragment>#.*)?$")
SECTION = re.compile(r'<h([23]) id="([^"]+)">(.*?)</h\1>', re.S)
CONTENTS_MIN_ENTRIES = 3  # fewer sections than this: the page is short enough to see whole


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def lab_names(docs: Path = DOCS) -> list[str]:
    """The lab notebook's investigations: docs/lab/<name>.md, the index left out."""
    return sorted(p.stem for p in (docs / LAB).glob("*.md") if p.stem != LAB_INDEX)


def is_page(doc: str, docs: Path) -> bool:
    """Whether `doc` (a path under docs/ without `.md`: "format", "lab/README", "lab/<name>") is served."""
    folder, _, name = doc.rpartition("/")
    if not folder:
        return name in PAGES
    return folder == LAB and re.fullmatch(r"[\w-]+", name) is not None and (docs / LAB / f"{name}.md").is_file()


def page_href(href: str, folder: str, docs: Path) -> str | None:
    """The page link for a link to a docs Markdown file written in a file of docs/<folder>, or None when
    it names no page (left as it is). The link stays relative: the site mirrors the folder."""
    m = DOC_LINK.match(href)
    if not m or not is_page(posixpath.normpath(posixpath.join(folder, m["path"])), docs):
        return None
    path = m["path"]
    if posixpath.basename(path) == LAB_INDEX:  # a folder's README is the folder's page
        path = path[: -len(LAB_INDEX)] or "./"
    return path + (m["fragment"] or "")


def page_links_and_anchors(state) -> None:
    """markdown-it core rule: ids on headings, and `.md` links to docs pages rewritten to the pages."""
    seen: dict[str, int] = {}
    tokens = state.tokens
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            slug = github_slug(tokens[i + 1].content)
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            token.attrSet("id", f"{slug}-{n}" if n else slug)
        for child in token.children or ():
            if child.type == "link_open" and (
                    href := page_href(child.attrGet("href") or "", state.env["folder"], state.env["docs"])):
                child.attrSet("href", href)


def alignment_classes(state) -> None:
    """markdown-it core rule: a table column's alignment (`---:`) as a class, not a style attribute, which
    the site's Content-Security-Policy (style-src 'self') refuses to apply; docs.css aligns the classes."""
    for token in state.tokens:
        if token.type not in ("th_open", "td_open"):
            continue
        if m := re.fullmatch(r"text-align:(\w+)", token.attrGet("style") or ""):
            del token.attrs["style"]
            token.attrSet("class", f"align-{m[1]}")


def markdown_renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    md.core.ruler.push("page_links_and_anchors", page_links_and_anchors)
    md.core.ruler.push("alignment_classes", alignment_classes)
    return md


def plain_text(markdown: str) -> str:
    """A line of Markdown as plain text, for a <title>: "The `.tinygpt` file" → "The .tinygpt file"."""
    return unescape(re.sub(r"<[^>]+>", "", MarkdownIt("commonmark").renderInline(markdown))).strip()


def with_bench_data(html: str, bench_dir: Path) -> str:
    """Each chart marker replaced by its figure and each machine marker by its machine's line; a marker
    naming a missing file is an error, not a gap, and so is an image link to a missing PNG of docs/bench."""
    def figure(m: re.Match) -> str:
        data = load_bench(bench_dir / m[1])
        return (f'<figure class="chart">{bench_svg(data)}<figcaption>Data: <code>docs/bench/{escape(m[1])}</code>, '
                f'from <code>{escape(data["command"])}</code>.</figcaption></figure>')

    def machine(m: re.Match) -> str:
        data = load_bench(bench_dir / m[1])
        source = f'<span class="bench-source">(<code>docs/bench/{escape(m[1])}</code>)</span>'
        return (f'<p class="bench-machine"><strong>Machine:</strong> {escape(data["device"])} · '
                f'{escape(data["date"])} {source}</p>')
    if missing := [name for name in BENCH_IMAGE.findall(html) if not (bench_dir / name).is_file()]:
        raise FileNotFoundError(f"{bench_dir}: no {', '.join(missing)} (linked as an image)")
    return MACHINE_MARKER.sub(machine, CHART_MARKER.sub(figure, html))


def contents_list(html: str) -> str:
    """The page's sections as a list of links to their headings: its h2s, or, on a page of one h2, that
    section and its h3s under it. Empty when there are too few to need one."""
    heads = [(int(level), anchor, re.sub(r"</?a\b[^>]*>", "", inner)) for level, anchor, inner in SECTION.findall(html)]
    sections = [h for h in heads if h[0] == 2]
    entries = sections if len(sections) > 1 else heads
    if len(entries) < CONTENTS_MIN_ENTRIES:
        return ""
    top = min(level for level, _, _ in entries)
    items: list[tuple[str, list[str]]] = []  # a top-level link and the links nested under it
    for level, anchor, inner in entries:
        link = f'<a href="#{anchor}">{inner}</a>'
        if level == top or not items:
            items.append((link, []))
        else:
            items[-1][1].append(link)
    lis = "".join(f"<li>{link}" + (f"<ol>{''.join(f'<li>{s}</li>' for s in subs)}</ol>" if subs else "") + "</li>"
                  for link, subs in items)
    return f'<nav class="contents" aria-label="Contents"><p class="contents-title">Contents</p><ol>{lis}</ol></nav>'


def with_contents(html: str) -> str:
    """The contents list where the page's marker says, else before its first section."""
    toc = contents_list(html)
    if CONTENTS_MARKER.search(html):
        return CONTENTS_MARKER.sub(lambda _: toc, html, count=1)
    first = html.find("<h2")
    return html if not toc or first < 0 else html[:first] + toc + "\n" + html[first:]


def bench_images(docs: Path = DOCS) -> list[str]:
    """The PNG files of docs/bench, the only files served at /bench/ (and copied there by `build`)."""
    return sorted(p.name for p in (docs / "bench").glob("*.png"))


@functools.lru_cache(maxsize=64)
def doc_body(source: Path, versions: tuple, folder: str, docs: Path) -> tuple[str, str]:
    """The plain-text title and HTML body of one Markdown file. Rendering the lab's longest files takes
    ~100 ms, so it is kept; `versions` (mtime and size of the file and of every chart and image file) is part
    of the cache key, so an edited file renders anew on the next request."""
    text = source.read_text()
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), source.stem)
    html = markdown_renderer().render(text, {"folder": folder, "docs": docs})
    return plain_text(title), with_contents(with_bench_data(html, docs / "bench"))


def render_doc(env: Environment, name: str, docs: Path = DOCS) -> str:
    """The page `name` ("performance", or "lab/<name>", "lab/README" for the lab's index), as a whole HTML
    document. Links to the site's root are relative: one "../" per folder the page is served under."""
    source = docs / f"{name}.md"
    bench = sorted((docs / "bench").glob("*.json")) + sorted((docs / "bench").glob("*.png"))
    versions = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in (source, *bench))
    folder = posixpath.dirname(name)
    title, body = doc_body(source, versions, folder, docs)
    return env.get_template("docs.html").render(title=title, body=body, pages=PAGES, current=name,
                                                source=f"docs/{name}.md", root="../" * name.count("/"))
