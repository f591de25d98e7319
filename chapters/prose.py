"""Chapter prose: each chapter home's chapter.md (chapters/chN/), front matter first, as a page body.

The body is a Jinja template before it is Markdown, so every figure in the prose comes from the
numbers model (`{{ fig.ch2.workers_at_target }}`) instead of being typed in, and every chart is
one call into templates/_charts.html fed by a series from core/series.py
(`{{ charts.line(series.wait_vs_utilisation, ...) }}`). Chapters define no macros and do no
arithmetic (tests/unit/test_chapter_rules.py); formatters are globals the app's Jinja environment holds.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from html import escape, unescape
from pathlib import Path
from types import ModuleType

import markdown
from jinja2 import Environment

_MD_EXTENSIONS = ["tables", "fenced_code", "attr_list", "md_in_html", "toc"]


@dataclass(frozen=True)
class Chapter:
    number: int
    slug: str
    title: str
    preset: str
    summary: str
    source: str
    meta: dict = field(default_factory=dict)
    path: Path | None = None  # its chapter.md
    addon: str = ""  # the naming key of its lab panel: templates/_lab_<addon>.html, static/js/lab-<addon>.js

    @property
    def url_slug(self) -> str:
        return f"{self.number}-{self.slug}"

    @property
    def figures(self) -> tuple[str, ...]:
        """The model figures this chapter declares it shows (front matter `figures:`, dotted keys
        such as ``ch2.workers_at_target``); tests/unit/test_chapter_rules.py checks each exists."""
        return tuple(k.strip() for k in self.meta.get("figures", "").split(",") if k.strip())


def parse_front_matter(text: str) -> tuple[dict, str]:
    """Split `---`-fenced `key: value` lines from the body (flat keys only; no YAML dependency)."""
    if not text.startswith("---\n"):
        return {}, text
    head, _, body = text[4:].partition("\n---\n")
    meta = {}
    for line in head.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition(":")
            meta[key.strip()] = value.strip()
    return meta, body


def from_home(number: int, home: ModuleType) -> Chapter:
    """A chapter from its home: the module's SLUG and ADDON, and chapter.md beside it."""
    path = Path(home.__file__).parent / "chapter.md"
    meta, body = parse_front_matter(path.read_text(encoding="utf-8"))
    return Chapter(
        number=number,
        slug=home.SLUG,
        title=meta.get("title", home.SLUG.replace("-", " ").title()),
        preset=meta.get("preset", f"ch{number}"),
        summary=meta.get("summary", ""),
        source=body,
        meta=meta,
        path=path,
        addon=getattr(home, "ADDON", ""),
    )


_compiled: dict[tuple[int, int], object] = {}
_rendered: OrderedDict[tuple, str] = OrderedDict()
RENDER_CACHE = 512  # chapter bodies kept per process, per (chapter, model inputs)


_TABLE = re.compile(r"<table\b.*?</table>", re.S)
_TAGS = re.compile(r"<[^>]+>")


def scrollable_tables(html: str) -> str:
    """Each table in its own horizontally scrolling box, so a wide table scrolls by itself on a phone
    instead of the whole page. The box is a labelled, focusable region: a keyboard can scroll it too.
    Code blocks (which scroll on a phone) take focus for the same reason."""

    def wrap(m: re.Match) -> str:
        table = m.group(0)
        cap = re.search(r"<caption\b[^>]*>(.*?)</caption>", table, re.S)
        heads = re.findall(r"<th\b[^>]*>(.*?)</th>", table, re.S)[:3]
        text = " ".join(unescape(_TAGS.sub("", cap.group(1) if cap else ", ".join(heads))).split())
        label = f"Table: {text}"[:120] if text else "Table"
        return f'<div class="table-scroll" role="region" tabindex="0" aria-label="{escape(label)}">{table}</div>'

    # a code block scrolls sideways on a phone too: it takes focus, so a keyboard can scroll it
    return _TABLE.sub(wrap, html).replace("<pre>", '<pre tabindex="0">')


def render_body(chapter: Chapter, env: Environment, context: dict) -> str:
    """Jinja first (figures, partial tables), then Markdown to HTML.

    The chapter's template is compiled once per process, and the finished HTML is kept per
    (chapter, model inputs): the body depends on nothing else, so a repeat visit costs a lookup."""
    inputs = context.get("inputs")
    try:
        cache_key = (chapter.number, hash(chapter.source), inputs)
        hash(cache_key)
    except TypeError:
        cache_key = None
    if cache_key is not None and cache_key in _rendered:
        _rendered.move_to_end(cache_key)
        return _rendered[cache_key]
    tkey = (chapter.number, hash(chapter.source))
    template = _compiled.get(tkey)
    if template is None:
        template = _compiled[tkey] = env.from_string(chapter.source)
    text = template.render(**context)  # type: ignore[attr-defined]
    html = scrollable_tables(markdown.markdown(text, extensions=_MD_EXTENSIONS, output_format="html"))
    if cache_key is not None:
        _rendered[cache_key] = html
        while len(_rendered) > RENDER_CACHE:
            _rendered.popitem(last=False)
    return html
