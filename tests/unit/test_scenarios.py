"""The scenario table and join codes: every scenario is valid settings on a chapter's preset."""

from urllib.parse import parse_qsl, urlsplit

import chapters
from app import links
from core import settings


def test_every_scenario_is_valid_settings_on_a_preset_a_room_can_run():
    assert {"vt-too-short", "retry-storm", "poison-pill"} <= set(chapters.SCENARIOS)
    for sid, sc in chapters.SCENARIOS.items():
        clean, errors = settings.validate(sc["settings"])
        assert not errors, (sid, errors)
        assert clean == sc["settings"]
        assert sc["preset"] in links.room_presets()
        assert links.settings_for(sid) == {**chapters.settings_for(sc["preset"]), **sc["settings"]}


def test_a_scenario_url_round_trips_every_setting_through_the_validator():
    for sid, sc in chapters.SCENARIOS.items():
        query = dict(parse_qsl(urlsplit(links.url_for(sid)).query))
        assert query.pop("scenario") == sid
        clean, errors = settings.validate(query)
        assert not errors and clean == sc["settings"]


def test_every_scenario_button_is_valid_settings_faults_and_jobs_on_a_known_preset():
    from core.broker.producer import JOB_TYPES
    from core.events import FAULTS, SAMPLES

    assert {"ch1", "ch4", "ch8"} <= set(chapters.BUTTONS)
    for preset, buttons in chapters.BUTTONS.items():
        assert preset in chapters.PRESETS, preset
        assert len({b["id"] for b in buttons}) == len(buttons), preset
        for b in buttons:
            where = (preset, b["id"])
            assert b["label"] and b["hint"], where
            assert {"settings", "fault", "enqueue", "kills"} & set(b), f"{where} does nothing"
            clean, errors = settings.validate(b.get("settings", {}))
            assert not errors and clean == b.get("settings", {}), (where, errors)
            if "fault" in b:
                assert b["fault"]["type"] in FAULTS, where
            if "enqueue" in b:
                job = b["enqueue"]
                assert job["sample"] in SAMPLES and job.get("job_type", "transcode") in JOB_TYPES, where
                assert not settings.validate({"job_duration": job.get("duration_s", 60)})[1], where
