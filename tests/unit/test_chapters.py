"""Every chapter renders from its Markdown file, and its figures come from the numbers model."""

import re

import pytest

import chapters
from app import create_app
from chapters import prose
from core import numbers
from core.config import Config


@pytest.fixture
def client():
    return create_app(Config(testing=True, redis_url="redis://127.0.0.1:1/0")).test_client()


def test_the_chapters_are_numbered_from_0_without_a_gap_each_with_a_preset():
    from chapters import PRESETS

    found = chapters.all_chapters()
    assert [c.number for c in found] == list(range(len(found))) and len(found) >= 9
    assert all(c.preset in PRESETS for c in found)


def test_the_home_page_lists_every_chapter(client):
    from markupsafe import escape

    html = client.get("/").get_data(as_text=True)
    for c in chapters.all_chapters():
        assert str(escape(c.title)) in html
        assert f"/chapters/{c.number}-{c.slug}" in html


def test_the_home_page_links_the_races_and_the_checked_lesson(client):
    html = client.get("/").get_data(as_text=True)
    for path in ("/races", "/lesson"):
        assert f'href="{path}"' in html, path
        assert client.get(path).status_code == 200, path


@pytest.mark.parametrize("number", [c.number for c in chapters.all_chapters()])
def test_each_chapter_renders_without_template_residue(client, number):
    res = client.get(f"/chapters/{number}")
    assert res.status_code == 200
    html = res.get_data(as_text=True)
    body = html.split('<div class="prose">', 1)[1]
    assert "{{" not in body and "{%" not in body
    assert not re.search(r"\bnan\b", body)
    assert 'class="try-this"' in body, "every chapter has a 'try this in the widget' exercise"
    assert body.count('class="answer"') >= 3, "every chapter has a self-check with hidden answers"


def test_changing_an_input_recomputes_the_figures_in_the_prose(client):
    default = chapters.derive()["ch2"]["workers_at_target"]
    doubled = chapters.derive(numbers.inputs_from_mapping({"arrival_rate": 200}))["ch2"]["workers_at_target"]
    assert doubled == 2 * default
    html = client.get("/chapters/2?arrival_rate=200").get_data(as_text=True)
    assert f"<strong>{doubled:,} workers</strong>" in html
    assert f"<strong>{default:,} workers</strong>" not in html


def test_an_out_of_range_input_is_reported_and_the_page_still_renders(client):
    res = client.get("/chapters/2?arrival_rate=-5")
    assert res.status_code == 200
    assert 'aria-invalid="true"' in res.get_data(as_text=True)


def test_an_unknown_chapter_is_a_404(client):
    assert client.get("/chapters/42").status_code == 404


def test_the_start_up_warm_up_leaves_every_chapter_body_rendered_and_cached():
    from app.routes.pages import warm

    prose._rendered.clear()
    warm(create_app(Config(testing=True)))
    cached = {k[0] for k in prose._rendered if k[2] == numbers.Inputs()}
    assert cached == {c.number for c in chapters.all_chapters()}


def test_each_chapter_shows_what_the_earlier_chapters_did_and_chapter_0_no_lease_redelivery_or_dlq(client):
    from chapters import PRESETS

    shows = client.get("/api/meta").get_json()["presets"]
    order = [c.preset for c in chapters.all_chapters()]  # in the course's order
    for before, after in zip(order, order[1:], strict=False):
        assert set(shows[before]["shows"]) <= set(shows[after]["shows"]), f"{after} hides what {before} showed"
    assert {"queue", "inflight", "workers", "clock"} <= set(shows["ch0"]["shows"])
    assert not {"lease", "redelivered", "dlq"} & set(shows["ch0"]["shows"])
    assert {"lease", "redelivered"} <= set(shows["ch1"]["shows"]) and "dlq" in shows["ch4"]["shows"]
    assert all("shows" in p for p in PRESETS.values())
