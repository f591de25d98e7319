"""Server-rendered course pages: the home page and one page per chapter.

A chapter page takes model inputs in its query string (`?arrival_rate=200`), so the same
render path serves the first load, the htmx round-trip when a learner moves an input, and a
shareable link to that what-if.
"""

from __future__ import annotations

import time
from functools import lru_cache

from flask import Blueprint, Flask, abort, current_app, render_template, request

import chapters
from core import lesson, numbers
from core.challenges import describe

bp = Blueprint("pages", __name__)


def model_from_query() -> tuple[numbers.Inputs, dict[str, str]]:
    """Inputs from the query string; bad values are reported per field and the defaults kept."""
    given = {k: v for k, v in request.args.items() if k in numbers.SPECS_BY_NAME and v != ""}
    try:
        return numbers.inputs_from_mapping(given), {}
    except numbers.InputError as e:
        return numbers.Inputs(), e.errors


def chapter_inputs(ch: chapters.Chapter, inputs: numbers.Inputs) -> list[dict]:
    """The learner-changeable inputs this chapter's front matter names, with current values."""
    names = [n.strip() for n in ch.meta.get("inputs", "").split(",") if n.strip()]
    by_name = {s["name"]: s for s in numbers.spec_values(inputs)}
    return [by_name[n] for n in names if n in by_name]


def shown_inputs(rows: list[dict], errors: dict[str, str]) -> tuple[list[dict], dict[str, str]]:
    """The What-if form as the learner left it when the model refused their values: each field keeps what was
    typed (not the lesson's value the figures fell back to), and a refusal about an input this page does not show
    (a 1,200 s mean against the p99 of 900 s) is said under the field it came from (the same job type's)."""
    if not errors:
        return rows, errors
    rows = [{**r, "value": request.args.get(r["name"], r["value"])} for r in rows]
    names = [r["name"] for r in rows]
    out = {k: v for k, v in errors.items() if k in names}
    for name, msg in errors.items():
        if name in names:
            continue
        kin = next((n for n in names if n.split("_")[0] == name.split("_")[0] and n in request.args), None)
        target = kin or next((n for n in names if n in request.args), names[0] if names else None)
        if target:
            label = numbers.SPECS_BY_NAME[name].label if name in numbers.SPECS_BY_NAME else name
            out[target] = (
                f"{out[target] + ' ' if target in out else ''}{msg} ({label} is not an input on this "
                "page); the figures below keep the lesson's values."
            )
    return rows, out


@bp.app_context_processor
def lab_panel() -> dict:
    """What the chapters' lab-panel templates read (each chapter home's PANEL, e.g. its buttons' settings)."""
    return {"panel": chapters.PANEL}


def lab_facts() -> dict:
    """What the chapter text says about the lab itself: each preset's settings and the lab's bounds."""
    from core.engines import loadgen

    return {
        "preset": {name: chapters.settings_for(name) for name in chapters.PRESETS},
        "max_in_flight": loadgen.MAX_IN_FLIGHT,
        **chapters.lab_facts(),
    }


@lru_cache(maxsize=1)
def lesson_figures() -> dict:
    """The numbers model at the lesson's own inputs (computed once per process)."""
    return chapters.derive(numbers.Inputs())


def warm(app: Flask) -> None:
    """Render the home page and every chapter once (the web worker calls this at start-up, in the
    background): compiled templates and the chapter bodies are then cached, so the first learner to
    open a chapter gets it as fast as the hundredth. A page that fails here fails again, visibly, when
    asked for."""
    client = app.test_client()
    for path in ["/", *(f"/chapters/{c.number}" for c in chapters.all_chapters())]:
        try:
            client.get(path, headers={"Accept-Encoding": "gzip"})
        except Exception:  # noqa: BLE001 — a warm-up never takes the worker down
            app.logger.debug("warm-up of %s failed", path, exc_info=True)
        time.sleep(0)  # yield to requests already being served (the worker's sleep is gevent's)


@bp.get("/")
def home():
    return render_template("home.html", chapters=chapters.all_chapters())


@bp.get("/lesson")
def lesson_conformance():
    """The conformance table: lesson claim → chapter section → test → what the lab measured at the last run."""
    results = lesson.load_results()
    return render_template(
        "lesson.html",
        rows=lesson.table(chapters.CLAIMS, results),
        results=results,
        summary=lesson.summary(chapters.CLAIMS),
    )


@bp.get("/chapters/<int:number>")
@bp.get("/chapters/<int:number>-<slug>")
def chapter(number: int, slug: str | None = None):
    ch = chapters.find(number)
    if ch is None:
        abort(404)
    inputs, input_errors = model_from_query()
    shown = shown_inputs(chapter_inputs(ch, inputs), input_errors)
    all_ch = chapters.all_chapters()
    idx = all_ch.index(ch)
    fig = chapters.derive(inputs)
    body = chapters.render_body(
        ch,
        current_app.jinja_env,
        {
            "fig": fig,
            "inputs": inputs,
            "series": chapters.chart_series(inputs, fig),
            "lab": lab_facts(),
            "charts": current_app.jinja_env.get_template("_charts.html").module,
        },
    )
    return render_template(
        "chapter.html",
        chapter=ch,
        body=body,
        chapters=all_ch,
        model_inputs=shown[0],
        input_errors=shown[1],
        challenges=[describe(k, v) for k, v in chapters.CHALLENGES.items() if v["chapter"] == ch.number],
        lesson_fig=lesson_figures(),  # a lab panel's model line is about the lesson's inputs, not the what-if's
        prev=all_ch[idx - 1] if idx > 0 else None,
        next=all_ch[idx + 1] if idx + 1 < len(all_ch) else None,
    )
