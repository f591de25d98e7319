"""One declaration per request body: the same fields check a request and describe it in the document."""

import pytest

from app import bodies, create_app
from app.errors import ApiError
from app.http import parse
from app.openapi import document
from core import settings
from core.config import Config


def test_defaults_fill_in_and_a_request_default_wins_over_the_declared_one():
    assert parse({}, bodies.FAIR_NOISY) == {"burst": 60, "others": 9}
    assert parse({}, bodies.JOB, duration_s=45.0) == {
        "job_type": "transcode",
        "sample": "bigbuckbunny",
        "duration_s": 45.0,
    }
    assert "customer" not in parse({}, bodies.FAIR_JOBS)  # no default: the route picks one per tier


def test_every_bad_field_is_named_with_the_code_of_the_first():
    with pytest.raises(ApiError) as e:
        parse({"sample": "nope", "duration_s": "long"}, bodies.JOB)
    assert e.value.status == 422 and e.value.error == "invalid_job"
    assert set(e.value.detail) == {"sample", "duration_s"}
    with pytest.raises(ApiError) as e:
        parse({"action": "start", "rate": 99, "seed": 1.5}, bodies.LOADGEN)
    assert e.value.error == "invalid_rate" and set(e.value.detail) == {"rate", "seed"}


def test_fields_that_are_settings_take_their_range_from_the_settings_schema():
    vt = settings.BY_NAME["vt_seconds"]
    with pytest.raises(ApiError) as e:
        parse({"vt_seconds": vt.max + 1}, bodies.SETTINGS)
    assert e.value.error == "invalid_settings" and "between" in e.value.detail["vt_seconds"]
    with pytest.raises(ApiError) as e:
        parse({"nope": 1}, bodies.SETTINGS)
    assert e.value.detail == {"nope": "unknown setting"}
    assert parse({"workers": "3"}, bodies.SETTINGS) == {"workers": 3}  # coerced as the settings schema does


def test_the_clock_step_and_a_fault_have_their_own_ranges_not_a_vt_or_a_job_duration():
    assert parse({"action": "step", "seconds": 5}, bodies.CLOCK)["seconds"] == 5  # below the VT minimum
    assert parse({"action": "step", "seconds": 3 * 3600}, bodies.CLOCK)["seconds"] == 3 * 3600
    assert parse({"type": "slow", "duration_s": 4 * 3600}, bodies.FAULT)["duration_s"] == 4 * 3600
    for body, spec, code in (
        ({"action": "step", "seconds": 0}, bodies.CLOCK, "invalid_step"),
        ({"type": "slow", "duration_s": 0}, bodies.FAULT, "invalid_fault"),
    ):
        with pytest.raises(ApiError) as e:
            parse(body, spec)
        assert e.value.error == code


def test_null_counts_as_left_out_only_where_declared():
    assert parse({"reason": None, "rate": None}, bodies.REPLAY) == {}
    with pytest.raises(ApiError):
        parse({"speed": None}, bodies.NEW_LAB)


def test_the_nested_settings_of_a_branch_report_their_own_names():
    with pytest.raises(ApiError) as e:
        parse({"branch_of": "abc", "at_event": "1-0", "settings": {"vt_seconds": 5}}, bodies.BRANCH)
    assert e.value.error == "invalid_settings" and "vt_seconds" in e.value.detail
    for at in ("0", "", "yesterday"):
        with pytest.raises(ApiError) as e:
            parse({"branch_of": "abc", "at_event": at}, bodies.BRANCH)
        assert e.value.error == "invalid_at_event"


def test_the_document_shows_each_routes_declared_body():
    doc = document(create_app(Config(testing=True, redis_url="redis://127.0.0.1:1/0")))
    for endpoint, specs in bodies.BODIES.items():
        ops = [
            op
            for ops in doc["paths"].values()
            for op in ops.values()
            if op["operationId"].rsplit("_", 1)[0] == endpoint
        ]
        assert ops, endpoint
        schema = ops[0]["requestBody"]["content"]["application/json"]["schema"]
        assert set(schema["properties"]) == {f.name for s in specs for f in s.fields}
    step = doc["paths"]["/api/labs/{lab_id}/clock"]["post"]["requestBody"]["content"]["application/json"]
    assert step["schema"]["properties"]["seconds"]["maximum"] == bodies.CLOCK.fields[1].max


def test_every_route_that_reads_a_json_body_declares_it():
    """One declaration per body: a route reading JSON with no Body in app/bodies.py would be validated by
    hand and missing from the OpenAPI document."""
    import inspect

    app = create_app(Config(testing=True, redis_url="redis://127.0.0.1:1/0"))
    readers = {
        name for name, fn in app.view_functions.items() if "json_body()" in inspect.getsource(inspect.unwrap(fn))
    }
    assert readers, "no route reads a JSON body?"
    assert sorted(readers - set(bodies.BODIES)) == []
