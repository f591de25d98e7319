"""The docs' references: every link and every repository path in README.md and docs/ names something that exists.

A Markdown link's target (relative to its file) must exist, and its `#anchor`, if any, must be a heading of the
target; a backticked path whose first part is one of the repository's top-level entries (`core/clock.py`,
`core/broker/`, `tests/lesson/test_ch1.py::test_x`) must exist in the tree. Placeholders (`<lab>`, `{id}`, `*`,
`…`) and anything outside the repository (`var/`, URLs) are not paths. The README stays a front door: at most
README_MAX_LINES lines. Also: every environment variable `core/config.py` reads is in docs/deploy.md's table.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 200
# the repository's top level (the product's list); a backticked path starting elsewhere is not the repo's
TOP_LEVEL = {
    "app",
    "bench",
    "chaos",
    "chapters",
    "core",
    "docs",
    "runtime",
    "static",
    "templates",
    "tests",
    "workers",
    ".ci",
    "lab.py",
    "Procfile",
    "pyproject.toml",
    "README.md",
}
PLACEHOLDER = re.compile(r"[<>{}*…\s|]")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^\s*```")


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append((n, line))
    return out


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().replace("`", "").lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            out.add(f"{s}-{seen[s]}" if s in seen else s)
            seen[s] = seen.get(s, 0) + 1
    return out


def broken_links(path: Path) -> list[str]:
    out = []
    for n, line in prose_lines(path):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{shown(path)}:{n}: ({target})"
            if not dest.exists():
                out.append(f"{where} names no file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                out.append(f"{where} names no heading of {shown(dest)}")
    return out


def repo_paths(text: str) -> list[str]:
    """The backticked repository paths in `text`, as written (a test id's `::name` dropped)."""
    out = []
    for code in CODE.findall(text):
        ref = code.split("::")[0].rstrip(".,;:")
        if PLACEHOLDER.search(ref) or ref.startswith("/"):
            continue
        if ref.split("/")[0] in TOP_LEVEL and ("/" in ref or ref in TOP_LEVEL):
            out.append(ref)
    return out


def broken_paths(path: Path) -> list[str]:
    return [
        f"{shown(path)}:{n}: `{ref}` is not in the tree"
        for n, line in prose_lines(path)
        for ref in repo_paths(line)
        if not (ROOT / ref).exists()
    ]


def test_every_link_in_readme_and_docs_resolves():
    broken = [b for f in doc_files() for b in broken_links(f)]
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)


def test_every_repository_path_in_readme_and_docs_exists():
    broken = [b for f in doc_files() for b in broken_paths(f)]
    assert not broken, "paths that name nothing:\n" + "\n".join(broken)


def test_the_readme_is_a_front_door():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_deploy_lists_every_variable_the_config_reads():
    source = (ROOT / "core" / "config.py").read_text()
    names = set(re.findall(r"""(?:environ\.get|_int|_float)\(\s*"([A-Z][A-Z0-9_]+)\"""", source))
    assert len(names) > 30, "core/config.py no longer reads its variables the way this test finds them"
    table = (ROOT / "docs" / "deploy.md").read_text()
    missing = sorted(n for n in names if f"`{n}`" not in table)
    assert not missing, f"docs/deploy.md's configuration table lacks {missing} (read in core/config.py)"


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The checkers themselves: a link to nowhere, a heading that is not there and a path not in the tree fail;
    what exists, placeholders, paths outside the repository and fenced code pass."""
    (tmp_path / "other.md").write_text("## Its part\n")
    page = tmp_path / "probe.md"
    page.write_text(
        "# A heading, with `code`\n\n[gone](nowhere.md) [self](#a-heading-with-code) [bad](#nope)"
        " [there](other.md#its-part) [not there](other.md#its-whole)\n"
        "`core/no_such_module.py` `core/clock.py` `var/bench/` `app/<x>.py` `/api/labs`\n"
        "```\n[fenced](ignored.md) `core/also_ignored.py`\n```\n"
    )
    assert [b.split(": ", 1)[1] for b in broken_links(page)] == [
        "(nowhere.md) names no file",
        "(#nope) names no heading of probe.md",
        "(other.md#its-whole) names no heading of other.md",
    ]
    assert [b.split(": ", 1)[1] for b in broken_paths(page)] == ["`core/no_such_module.py` is not in the tree"]
