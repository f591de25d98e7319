"""The scenario table and join codes: every scenario is valid settings on a chapter's preset."""

from urllib.parse import parse_qsl, urlsplit

from app import presets, scenarios, settings


def test_every_scenario_is_valid_settings_on_a_preset_a_room_can_run():
    assert {"vt-too-short", "retry-storm", "poison-pill"} <= set(scenarios.SCENARIOS)
    for sid, sc in scenarios.SCENARIOS.items():
        clean, errors = settings.validate(sc["settings"])
        assert not errors, (sid, errors)
        assert clean == sc["settings"]
        assert sc["preset"] in scenarios.room_presets()
        assert scenarios.settings_for(sid) == {**presets.settings_for(sc["preset"]), **sc["settings"]}


def test_a_scenario_url_round_trips_every_setting_through_the_validator():
    for sid, sc in scenarios.SCENARIOS.items():
        query = dict(parse_qsl(urlsplit(scenarios.url_for(sid)).query))
        assert query.pop("scenario") == sid
        clean, errors = settings.validate(query)
        assert not errors and clean == sc["settings"]

