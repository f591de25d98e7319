"""The settings schema is the one place that says what a learner may change, and to what."""

from typing import Literal, get_type_hints

import chapters
from core import settings


def test_every_preset_only_overrides_known_settings_with_valid_values():
    for name, preset in chapters.PRESETS.items():
        clean, errors = settings.validate(preset["settings"])
        assert errors == {}, name
        assert chapters.settings_for(name)["vt_seconds"] == clean.get("vt_seconds", settings.DEFAULTS["vt_seconds"])


def test_out_of_range_wrong_type_and_unknown_names_get_one_message_each():
    clean, errors = settings.validate(
        {
            "vt_seconds": 5,
            "workers": "many",
            "heartbeat": "maybe",
            "ack_mode": "sometimes",
            "colour": "red",
            "max_attempts": 2.5,
        }
    )
    assert clean == {}
    assert set(errors) == {"vt_seconds", "workers", "heartbeat", "ack_mode", "colour", "max_attempts"}
    assert "between 10 and 7200" in errors["vt_seconds"]
    assert "whole number" in errors["max_attempts"]


def test_numbers_as_strings_and_bools_as_words_are_accepted():
    clean, errors = settings.validate({"vt_seconds": "1200", "heartbeat": "on", "workers": 3.0})
    assert errors == {} and clean == {"vt_seconds": 1200.0, "heartbeat": True, "workers": 3}


def test_a_bool_is_not_a_number_and_nan_is_refused():
    _, errors = settings.validate({"workers": True, "vt_seconds": "nan"})
    assert set(errors) == {"workers", "vt_seconds"}


def test_a_non_object_body_is_an_error_not_a_crash():
    assert settings.validate(["vt_seconds"])[1] == {"_": "settings must be a JSON object"}


def test_the_typed_settings_record_has_exactly_the_schemas_fields_and_types():
    # settings.LabSettings is written out for the type checker; SCHEMA stays the source: a setting added, removed,
    # renamed, retyped or given another choice without the record following fails here.
    kinds = {"int": int, "float": float, "bool": bool}
    expected = {s.name: kinds[s.kind] if s.kind in kinds else Literal[s.choices] for s in settings.SCHEMA}
    hints = get_type_hints(settings.LabSettings)
    assert list(hints) == list(expected)
    assert hints == expected
    assert settings.LabSettings.__required_keys__ == frozenset(expected)
    for s in settings.SCHEMA:
        assert isinstance(s.default, kinds[s.kind]) if s.kind in kinds else s.default in s.choices, s.name
