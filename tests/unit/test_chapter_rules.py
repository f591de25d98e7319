"""Chapters hold prose, `{{ fig.* }}` and chart calls only: no macros, no SVG, no arithmetic.

The Jinja source of every chapter is parsed and walked: a `{% macro %}`, an inline `<svg>` or an
arithmetic operator (`+ - * / // % **`, unary minus) anywhere in it fails, naming file and line.
Any number a chapter needs is a figure in the numbers model (its home, chapters/chN/), any chart a series
in its chapter home (CHARTS) drawn by templates/_charts.html.
"""

import re

import pytest
from jinja2 import Environment, nodes

import chapters
from core import numbers

_ARITHMETIC = (nodes.Add, nodes.Sub, nodes.Mul, nodes.Div, nodes.FloorDiv, nodes.Mod, nodes.Pow, nodes.Neg)


def _parsed(ch):
    text = ch.path.read_text(encoding="utf-8")
    offset = text[: len(text) - len(ch.source)].count("\n")
    return f"ch{ch.number}/{ch.path.name}", Environment().parse(ch.source), offset


@pytest.mark.parametrize("ch", chapters.all_chapters(), ids=lambda c: c.slug)
def test_a_chapter_defines_no_macro_and_draws_no_svg(ch):
    name, tree, offset = _parsed(ch)
    macros = [f"{name}:{m.lineno + offset} macro {m.name}" for m in tree.find_all(nodes.Macro)]
    assert not macros, "chapters call shared formatters and charts; they define none"
    assert not re.search(r"<svg\b", ch.source), f"{name}: draw charts with templates/_charts.html"


@pytest.mark.parametrize("ch", chapters.all_chapters(), ids=lambda c: c.slug)
def test_a_chapter_does_no_arithmetic(ch):
    name, tree, offset = _parsed(ch)
    lines = sorted({n.lineno + offset for n in tree.find_all(_ARITHMETIC)})
    assert not lines, f"arithmetic in {name} at lines {lines}: make it a figure in its chapter home"


def test_the_scanner_catches_what_it_should():
    env = Environment()
    for src in [
        "{{ (x / 60) | num }}",
        "{% set y = a * 2 %}",
        "{{ a - b }}",
        "{{ -a }}",
        "{% for k in range(0, n + 1) %}{% endfor %}",
    ]:
        assert list(env.parse(src).find_all(_ARITHMETIC)), src
    for src in [
        "{{ fig.ch2.workers_at_target | num }}",
        "{{ 'a' ~ b }}",
        "{% set s = fig.ch1 %}",
        "{{ charts.line(series.wait_vs_utilisation, 'wc', 'title') }}",
        "{{ '2 - 1' }}",
    ]:
        assert not list(env.parse(src).find_all(_ARITHMETIC)), src
    assert list(env.parse("{% macro m() %}{% endmacro %}").find_all(nodes.Macro))


@pytest.mark.parametrize("ch", chapters.all_chapters(), ids=lambda c: c.slug)
def test_every_figure_a_chapter_declares_exists_in_the_numbers_model(ch):
    """The `figures:` front-matter key is the chapter's declared list of model figures."""
    fig = chapters.derive()
    for key in ch.figures:
        numbers.lookup(fig, key)  # raises on a figure the model does not compute
    assert ch.figures, "each chapter declares the figures it shows"
