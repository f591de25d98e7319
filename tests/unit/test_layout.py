"""The layout's import rules, read from the source with `ast` (function-level imports counted too):
which top-level package may import which, and no package-level import cycle.

Another tree is checked with LAYOUT_ROOT=<path> (e.g. an older checkout, to see a rule fail)."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.config import ROOT

PACKAGES = ("app", "core", "chapters", "workers", "runtime", "bench", "chaos", "tests")
TREE = Path(os.environ.get("LAYOUT_ROOT") or ROOT)


@dataclass(frozen=True)
class Import:
    """One import statement: the file and line it is on, the package importing and the module imported."""

    file: str
    line: int
    source: str  # top-level package of the importing file
    module: str  # the imported module, absolute

    @property
    def target(self) -> str:
        return self.module.split(".")[0]

    def __str__(self) -> str:
        return f"{self.file}:{self.line} imports {self.module}"


def _modules(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif node.level:  # relative: from the importing file's own package
        base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
        yield f"{base}.{node.module}" if node.module else base
    else:
        yield node.module or ""


def imports(tree: Path = TREE) -> list[Import]:
    """Every import in every .py file of the top-level packages."""
    found = []
    for top in PACKAGES:
        for path in sorted((tree / top).rglob("*.py")):
            rel = path.relative_to(tree)
            package = ".".join(rel.with_suffix("").parts[:-1])
            for node in ast.walk(ast.parse(path.read_text(), str(rel))):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found.extend(Import(str(rel), node.lineno, top, m) for m in _modules(node, package))
    return found


def _edges(found: list[Import]) -> dict[tuple[str, str], list[Import]]:
    edges: dict[tuple[str, str], list[Import]] = {}
    for imp in found:
        if imp.target in PACKAGES and imp.target != imp.source:
            edges.setdefault((imp.source, imp.target), []).append(imp)
    return edges


def cycles(edges: dict[tuple[str, str], list[Import]]) -> list[list[str]]:
    """Every simple cycle among the packages, each once (it starts at its smallest package)."""
    after: dict[str, set[str]] = {}
    for a, b in edges:
        after.setdefault(a, set()).add(b)
    found = []

    def walk(start: str, path: list[str]) -> None:
        for nxt in sorted(after.get(path[-1], ())):
            if nxt == start:
                found.append(path + [start])
            elif nxt > start and nxt not in path:
                walk(start, path + [nxt])

    for start in sorted(after):
        walk(start, [start])
    return found


FORBIDDEN = {  # importing package → what it must never import
    "app": ("workers",),
    "core": ("flask", "app", "workers", "runtime"),
    "chapters": ("flask", "app", "workers", "runtime"),
    "workers": ("app", "flask"),
    "bench": ("chaos",),
    "chaos": ("bench",),
    "tests": ("bench",),  # the harness is runtime/harness/; a test runs a chaos drill only to test that drill
}


@pytest.fixture(scope="module")
def found() -> list[Import]:
    return imports()


def test_the_tree_has_the_packages(found: list[Import]) -> None:
    """The check reads real source: the packages every checkout has, each with imports to read."""
    missing = {"app", "core", "workers", "runtime", "tests"} - {imp.source for imp in found}
    assert not missing, f"not a checkout of the lab ({TREE}): no imports read in {sorted(missing)}"


def test_no_package_level_import_cycle(found: list[Import]) -> None:
    edges = _edges(found)
    loops = cycles(edges)
    shown = [
        " → ".join(loop) + ": " + "; ".join(str(edges[(a, b)][0]) for a, b in zip(loop, loop[1:], strict=False))
        for loop in loops
    ]
    assert not loops, "package-level import cycles:\n" + "\n".join(shown)


@pytest.mark.parametrize("source", sorted(FORBIDDEN))
def test_forbidden_imports(found: list[Import], source: str) -> None:
    bad = [imp for imp in found if imp.source == source and imp.target in FORBIDDEN[source]]
    assert not bad, f"{source}/ imports what it must not ({', '.join(FORBIDDEN[source])}):\n" + "\n".join(map(str, bad))


def test_nothing_imports_tests(found: list[Import]) -> None:
    bad = [imp for imp in found if imp.source != "tests" and imp.target == "tests"]
    assert not bad, "imports of tests/ from outside it:\n" + "\n".join(map(str, bad))
