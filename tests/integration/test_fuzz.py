"""Fuzz the whole HTTP API from its own OpenAPI document (schemathesis), against the real stack.

Every operation in the document gets generated requests, valid and invalid; each answer must be no
5xx, a status the document lists, a documented content type and a body matching the documented
schema. Path parameters name a real lab (with its token), so the fuzzing gets past the 404 at the door
and reaches validation; the seed is fixed, so a failure replays.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app import create_app
from app.openapi import document
from core.config import Config
from tests.conftest import Api

pytestmark = pytest.mark.integration
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def fuzz_lab(stack):
    """A lab with no workers: fuzzed jobs queue without spending CPU on transcodes."""
    client = Api(stack.url)
    lab = client.lab("ch0", speed=20, workers=0)
    yield lab
    for made in client.created:
        client.call("DELETE", f"/api/labs/{made['lab_id']}", token=made["token"])


# The document as the app builds it (the same code serves /api/openapi.json; checked below). Loaded
# at import, because schemathesis' lazy fixture loader does not run under this pytest.
DOC = document(create_app(Config(testing=True, redis_url="redis://127.0.0.1:1/0")))
schema = schemathesis.openapi.from_dict(DOC)


def test_the_served_document_is_the_one_fuzzed(api):
    assert api.call("GET", "/api/openapi.json").json() == DOC


def cheap(body):
    """Keep what a fuzzer may ask of the machine small: valid worker counts become 0, speeds ≤ 20,
    clips the smallest one (invalid values pass through untouched: validation is what is fuzzed)."""
    if isinstance(body, dict):
        if body.get("sample") in ("bigbuckbunny", "bikes"):
            body["sample"] = "carphone_pristine"
        if isinstance(body.get("workers"), int) and not isinstance(body["workers"], bool) and body["workers"] > 0:
            body["workers"] = 0
        if isinstance(body.get("speed"), int | float) and not isinstance(body["speed"], bool) and body["speed"] > 20:
            body["speed"] = 20
    return body


@schema.parametrize()
@settings(max_examples=20, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_the_api_holds_to_its_document_under_generated_requests(case, fuzz_lab, stack):
    if "lab_id" in (case.path_parameters or {}) and case.method != "DELETE":
        case.path_parameters["lab_id"] = fuzz_lab["lab_id"]
    if "lab" in (case.path_parameters or {}):
        case.path_parameters["lab"] = fuzz_lab["lab_id"]
    case.body = cheap(case.body)
    response = case.call(base_url=stack.url, headers={"Authorization": f"Bearer {fuzz_lab['token']}"}, timeout=60)
    if case.method == "POST" and case.path == "/api/labs" and response.status_code == 201:
        made = response.json()  # delete labs as fast as the fuzzer makes them: each would start workers
        Api(stack.url).call("DELETE", f"/api/labs/{made['lab_id']}", token=made["token"])
    case.validate_response(response, checks=CHECKS)
