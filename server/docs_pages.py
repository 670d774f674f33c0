"""The docs pages (/learn, /format, /performance, …): docs/<name>.md rendered to HTML with markdown-it
(CommonMark + tables, the dialect the files are written in for GitHub) inside
site/templates/docs.html. Links between docs files (`format.md#header-keys`) become links between
pages (`format#header-keys`), headings get GitHub's anchor ids so those fragments resolve, and a
`<!-- bench-chart: FILE.json -->` line becomes the SVG chart of docs/bench/FILE.json. An image link to
a PNG of docs/bench (`![…](bench/FILE.png)`, which GitHub resolves beside the file) is served at
/bench/FILE.png (bench_images), so the same relative link works on the pages."""
from __future__ import annotations

import functools
import re
from html import escape
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
CHART_MARKER = re.compile(r"<!--\s*bench-chart:\s*([\w.-]+\.json)\s*-->")
BENCH_IMAGE = re.compile(r'<img src="bench/([\w.-]+\.png)"')
DOC_LINK = re.compile(r"^(?:\./)?([\w-]+)\.md(#.*)?$")


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


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
            if child.type == "link_open" and (m := DOC_LINK.match(child.attrGet("href") or "")) and m[1] in PAGES:
                child.attrSet("href", m[1] + (m[2] or ""))


def markdown_renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    md.core.ruler.push("page_links_and_anchors", page_links_and_anchors)
    return md


def with_charts(html: str, bench_dir: Path) -> str:
    """Each chart marker replaced by its figure; a marker naming a missing file is an error, not a gap,
    and so is an image link to a missing PNG of docs/bench."""
    def figure(m: re.Match) -> str:
        data = load_bench(bench_dir / m[1])
        return (f'<figure class="chart">{bench_svg(data)}<figcaption>Data: <code>docs/bench/{escape(m[1])}</code>, '
                f'from <code>{escape(data["command"])}</code>.</figcaption></figure>')
    if missing := [name for name in BENCH_IMAGE.findall(html) if not (bench_dir / name).is_file()]:
        raise FileNotFoundError(f"{bench_dir}: no {', '.join(missing)} (linked as an image)")
    return CHART_MARKER.sub(figure, html)


def bench_images(docs: Path = DOCS) -> list[str]:
    """The PNG files of docs/bench, the only files served at /bench/ (and copied there by `build`)."""
    return sorted(p.name for p in (docs / "bench").glob("*.png"))


@functools.lru_cache(maxsize=4 * len(PAGES))
def doc_body(source: Path, versions: tuple) -> tuple[str, str]:
    """The title and HTML body of one Markdown file. Rendering the performance page takes ~90 ms, so
    it is kept; `versions` (mtime and size of the file and of every chart and image file) is part of the
    cache key, so an edited file renders anew on the next request."""
    text = source.read_text()
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), source.stem)
    return title, with_charts(markdown_renderer().render(text), source.parent / "bench")


def render_doc(env: Environment, name: str, docs: Path = DOCS) -> str:
    """The page `name` of PAGES, as a whole HTML document."""
    source = docs / f"{name}.md"
    bench = sorted((docs / "bench").glob("*.json")) + sorted((docs / "bench").glob("*.png"))
    versions = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in (source, *bench))
    title, body = doc_body(source, versions)
    return env.get_template("docs.html").render(title=title, body=body, pages=PAGES, current=name, root="")
