"""Room pieces that need no server: join codes as students type them, and the documented room calls."""

from app import create_app
from app.openapi import document
from app.routes import rooms
from core.config import Config


def test_join_codes_are_read_the_way_students_type_them():
    assert rooms.normalise(" abc-def ") == "ABCDEF"
    assert rooms.pretty("ABCDEF") == "ABC-DEF"
    assert rooms.pretty("ABCDEFGHJK") == "ABCDE-FGHJK" and rooms.CODE_LENGTH == 10  # 32^10: not guessable
    assert not set(rooms.ALPHABET) & set("0O1I") and len(set(rooms.ALPHABET)) == len(rooms.ALPHABET)
    assert (
        rooms.chapter_link({"code": "ABCDEF", "preset": "ch4", "scenario": "retry-storm"}, present="1")
        == "/chapters/4-retries-and-backoff?room=ABCDEF&scenario=retry-storm&present=1"
    )


def test_every_room_call_is_in_the_openapi_document_with_its_body():
    doc = document(create_app(Config(testing=True, redis_url="redis://127.0.0.1:1/0")))
    paths = doc["paths"]
    for method, path in [
        ("post", "/api/rooms"),
        ("get", "/api/rooms/{code}"),
        ("post", "/api/rooms/{code}/follow"),
        ("post", "/api/rooms/{code}/presence"),
        ("get", "/api/rooms/{code}/status"),
        ("get", "/api/rooms/{code}/qr.svg"),
        ("delete", "/api/rooms/{code}"),
        ("get", "/api/scenarios"),
        ("get", "/api/labs/{lab_id}/export.jsonl"),
        ("get", "/api/labs/{lab_id}/export.csv"),
    ]:
        assert method in paths.get(path, {}), f"{method.upper()} {path} missing"
    create = paths["/api/rooms"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(create["properties"]["scenario"]["enum"]) == {"vt-too-short", "retry-storm", "poison-pill"}
    assert "requestBody" in paths["/api/rooms/{code}/presence"]["post"]
    assert paths["/api/labs/{lab_id}/export.csv"]["get"]["security"] == [{"bearer": []}]


def test_ask_the_class_lists_each_question_under_a_distinct_label():
    """The dashboard's menu shows `scenario: question`; two scenarios may ask the same question of different
    set-ups (chapter 1's "How many attempts…?" for VT too short and for the fix), so the pair must differ."""
    from app import links

    asked = 0
    for preset in links.room_presets():
        labels = [f"{p['scenario']}: {p['question']}" for p in rooms.predictions_for(preset).values()]
        assert len(labels) == len(set(labels)), (preset, labels)
        asked += len(labels)
    assert asked >= 2
