"""The OpenAPI document covers every call of the public contract, because it is built from the routes."""

from app import create_app
from app.openapi import document
from core.config import Config

CONTRACT = [
    ("post", "/api/labs"),
    ("get", "/api/labs/{lab_id}"),
    ("patch", "/api/labs/{lab_id}/settings"),
    ("post", "/api/labs/{lab_id}/jobs"),
    ("get", "/api/labs/{lab_id}/jobs/{job_id}"),
    ("get", "/api/labs/{lab_id}/jobs/{job_id}/outputs/{name}"),
    ("post", "/api/labs/{lab_id}/workers/{worker_id}/kill"),
    ("post", "/api/labs/{lab_id}/faults"),
    ("get", "/api/labs/{lab_id}/dlq"),
    ("post", "/api/labs/{lab_id}/dlq/replay"),
    ("post", "/api/labs/{lab_id}/clock"),
    ("get", "/api/labs/{lab_id}/events"),
    ("get", "/ws/labs/{lab}"),
    ("get", "/healthz"),
    ("get", "/metrics"),
]


def test_every_contract_call_is_documented_with_its_path_parameters():
    app = create_app(Config(testing=True, redis_url="redis://127.0.0.1:1/0"))
    doc = document(app)
    for method, path in CONTRACT:
        assert method in doc["paths"].get(path, {}), f"{method.upper()} {path} missing"
        params = {p["name"] for p in doc["paths"][path][method]["parameters"] if p["in"] == "path"}
        assert params == {seg[1:-1] for seg in path.split("/") if seg.startswith("{")}


def test_the_document_matches_the_url_map_exactly():
    app = create_app(Config(testing=True, redis_url="redis://127.0.0.1:1/0"))
    documented = {(m, p) for p, ops in document(app)["paths"].items() for m in ops}
    routed = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith(("/api/", "/ws/", "/healthz", "/metrics")):
            path = rule.rule
            for arg in rule.arguments:
                path = path.replace(f"<{arg}>", "{" + arg + "}")
            routed |= {(m.lower(), path) for m in rule.methods - {"HEAD", "OPTIONS"}}
    assert documented == routed


def test_settings_patch_schema_comes_from_the_settings_schema():
    from core import settings

    app = create_app(Config(testing=True, redis_url="redis://127.0.0.1:1/0"))
    op = document(app)["paths"]["/api/labs/{lab_id}/settings"]["patch"]
    props = op["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert set(props) == set(settings.BY_NAME)
    assert props["vt_seconds"]["minimum"] == settings.BY_NAME["vt_seconds"].min
