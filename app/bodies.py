"""One declaration per request body: what `parse` (app/http.py) checks and what the OpenAPI document shows.

A `Body` names its route and lists its fields in the order they are checked. A field that IS a lab
setting (`setting="speed"`) takes its type, range, message and description from `core.settings`, so
a range lives once. Every other field says its own type, range or choices, default and description.
Checking never raises here: `Body.check` answers (clean values, {field: message}, error code), and
`app.http.parse` turns errors into the 422 the route has always answered, with the code of the first
field that failed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import chapters
from app import links
from core import settings
from core.broker import producer
from core.challenges.box import CODE_MAX
from core.engines import fairness, loadgen
from core.events import FAULTS, SAMPLES

ABSENT: Any = object()
"""A field with this default is left out of the clean values when the body leaves it out."""

_TYPES = {"int": "integer", "number": "number", "string": "string", "bool": "boolean", "object": "object"}
_KIND = {"int": "integer", "float": "number", "bool": "boolean", "choice": "string"}


@dataclass(frozen=True)
class Field:
    name: str
    kind: str = "string"
    """int (a JSON integer, not 3.0), number, string, choice, object (a nested Body), json (any JSON value,
    checked by the route against what only it knows: a room question's own range or choices), or setting."""
    doc: str = ""
    default: Any = ABSENT
    min: float | None = None
    max: float | None = None
    above: float | None = None
    """An exclusive minimum (a rate must be more than 0)."""
    choices: tuple[str, ...] = ()
    max_length: int | None = None
    min_length: int | None = None
    pattern: str | None = None
    required: bool = False
    nullable: bool = False
    """null counts as leaving the field out."""
    setting: str | None = None
    """The lab setting this field is: type, range, message and description come from core.settings."""
    body: Body | None = None
    """For kind "object": the nested body; its errors are reported under their own names."""
    error: str | None = None
    """The error code when this field is wrong (default: the body's)."""
    status: int = 422
    """The status when this field is wrong: 404 where a wrong value names nothing that exists (a lab id)."""
    message: str | None = None
    """The message when this field is wrong (default: one built from the type and range)."""
    check: Callable[[Any], bool] | None = None
    """A domain rule the schema cannot say (a stream id is not "0"); False means the field is wrong."""

    # --- checking ------------------------------------------------------------------------------
    def clean(self, value: Any) -> Any:
        """The value in its clean form, or ValueError with a message a learner can act on."""
        if self.setting:
            clean, errors = settings.validate({self.setting: value})
            if errors:
                raise ValueError(self.message or errors[self.setting])
            return clean[self.setting]
        if self.kind == "object":
            assert self.body is not None
            if not isinstance(value, dict):
                raise ValueError(self.message or "must be a JSON object")
            return value  # checked field by field by Body.check
        ok = self._fits(value) and (self.check is None or self.check(value))
        if not ok:
            raise ValueError(self.message or self._expected())
        return value

    def _fits(self, value: Any) -> bool:
        if self.kind == "json":
            return True
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if self.kind == "string":
            return (
                isinstance(value, str)
                and len(value) >= (self.min_length or 0)
                and (self.max_length is None or len(value) <= self.max_length)
                and (self.pattern is None or re.fullmatch(self.pattern, value) is not None)
            )
        if self.kind == "bool":
            return isinstance(value, bool)
        number = int if self.kind == "int" else (int, float)
        if isinstance(value, bool) or not isinstance(value, number) or value != value:
            return False
        return (
            (self.min is None or value >= self.min)
            and (self.max is None or value <= self.max)
            and (self.above is None or value > self.above)
        )

    def _expected(self) -> str:
        if self.kind == "choice":
            return f"must be one of {', '.join(self.choices)}"
        if self.kind == "string":
            return f"must be text of at most {self.max_length} characters" if self.max_length else "must be text"
        what = "a whole number" if self.kind == "int" else "a number"
        if self.above is not None:
            return f"must be {what} in ({self.above:g}, {self.max:g}]"
        return f"must be {what} between {self.min:g} and {self.max:g}"

    # --- the document ---------------------------------------------------------------------------
    def schema(self) -> dict[str, Any]:
        if self.setting:
            prop = setting_schema(settings.BY_NAME[self.setting])
            if self.doc:
                prop["description"] = self.doc
        elif self.kind == "object":
            assert self.body is not None
            prop = dict(self.body.schema(), description=self.doc) if self.doc else self.body.schema()
        elif self.kind == "json":
            prop = {"description": self.doc} if self.doc else {}
        else:
            prop = {"type": "string" if self.kind == "choice" else _TYPES[self.kind]}
            for key, value in (
                ("enum", list(self.choices) or None),
                ("minimum", self.min),
                ("maximum", self.max),
                ("exclusiveMinimum", self.above),
                ("maxLength", self.max_length),
                ("minLength", self.min_length),
                ("pattern", self.pattern),
            ):
                if value is not None:
                    prop[key] = value
            if self.doc:
                prop["description"] = self.doc
            if self.default is not ABSENT and self.default is not None:
                prop["default"] = self.default
        return prop  # a nullable field is shown without null: sending null is the same as leaving it out


def setting_schema(s: settings.Setting) -> dict[str, Any]:
    """One lab setting as a JSON Schema property (type, range or choices, default, its doc)."""
    prop: dict[str, Any] = {"type": _KIND.get(s.kind, "string"), "description": s.doc, "default": s.default}
    if s.kind == "choice":
        prop["enum"] = list(s.choices)
    elif s.kind in ("int", "float"):
        prop.update(minimum=s.min, maximum=s.max)
    return prop


BODIES: dict[str, list[Body]] = {}
"""Route endpoint → the bodies it parses (the document shows them merged)."""


@dataclass(frozen=True)
class Body:
    endpoint: str
    fields: tuple[Field, ...]
    error: str = "invalid_body"
    unknown: str | None = None
    """If set, a field not declared is an error with this message (the settings body); else it is ignored."""
    register: bool = field(default=True, compare=False)

    def __post_init__(self) -> None:
        if self.register:
            BODIES.setdefault(self.endpoint, []).append(self)

    def check(
        self, body: dict[str, Any], defaults: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, str], tuple[str, int] | None]:
        """(clean values, {field: message}, (error code, status) of the first field that failed)."""
        clean: dict[str, Any] = {}
        errors: dict[str, str] = {}
        code: tuple[str, int] | None = None
        for f in self.fields:
            value = body.get(f.name, ABSENT)
            if value is None and f.nullable:
                value = ABSENT
            if value is ABSENT:
                if f.required:
                    errors[f.name] = f.message or f._expected()
                    code = code or (f.error or self.error, f.status)
                    continue
                default = (defaults or {}).get(f.name, f.default)
                if default is not ABSENT:
                    clean[f.name] = default
                continue
            try:
                clean[f.name] = f.clean(value)
            except ValueError as e:
                errors[f.name] = str(e)
                code = code or (f.error or self.error, f.status)
                continue
            if f.kind == "object" and f.body is not None:
                inner, inner_errors, inner_code = f.body.check(value)
                clean[f.name] = inner
                if inner_errors:
                    errors.update(inner_errors)
                    code = code or ((f.error, f.status) if f.error else inner_code)
        if self.unknown is not None:
            known = {f.name for f in self.fields}
            for name in body:
                if name not in known:
                    errors[name] = self.unknown
                    code = code or (self.error, 422)
        return clean, errors, code

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object", "properties": {f.name: f.schema() for f in self.fields}}
        required = [f.name for f in self.fields if f.required]
        if required:
            out["required"] = required
        if self.unknown is not None:
            out["additionalProperties"] = False
        return out


def document_schema(endpoint: str) -> dict[str, Any] | None:
    """The request body schema of one route: its bodies merged (a field declared twice: the first)."""
    bodies = BODIES.get(endpoint)
    if not bodies:
        return None
    if len(bodies) == 1:
        return bodies[0].schema()
    props: dict[str, Any] = {}
    for b in bodies:
        for name, prop in b.schema()["properties"].items():
            props.setdefault(name, prop)
    return {"type": "object", "properties": props}


def _event_id(value: str) -> bool:
    return value != "0"


def _letters_or_digits(value: str) -> bool:
    return value.isalnum()


_STREAM_ID = r"^\d+(-\d+)?$"
TIER = Field("tier", "choice", "the customer tier", default="free", choices=fairness.TIERS)

# --- routes: labs, settings, clock --------------------------------------------------------------
SETTINGS = Body(
    "settings.patch_settings",
    tuple(Field(s.name, setting=s.name) for s in settings.SCHEMA),
    error="invalid_settings",
    unknown="unknown setting",
)
NEW_LAB = Body(
    "labs.create_lab",
    (
        Field(
            "preset",
            "choice",
            "the chapter preset the lab starts from",
            default=chapters.DEFAULT_PRESET,
            choices=tuple(chapters.PRESETS),
            error="invalid_preset",
        ),
        Field("speed", setting="speed", error="invalid_settings"),  # default: the deployment's SPEED
    ),
)
BRANCH = Body(
    "labs.create_lab",
    (
        Field(
            "branch_of",
            "string",
            "branch this lab (send its token or view token): the new lab starts from that lab's moment `at_event`",
            required=True,
            min_length=1,
            max_length=32,
            error="invalid_branch",
            message="must be the id of the lab to branch from",
        ),
        Field(
            "at_event",
            "string",
            "an event id of `branch_of`; the jobs not yet done then are enqueued again as new jobs",
            required=True,
            max_length=40,
            pattern=_STREAM_ID,
            check=_event_id,
            error="invalid_at_event",
            message="must be an event id of the parent lab, like 1700000000000-0",
        ),
        Field(
            "settings",
            "object",
            "settings changed for the branch (on top of the parent's settings at `at_event`)",
            body=Body(
                "labs.create_lab", SETTINGS.fields, error="invalid_settings", unknown="unknown setting", register=False
            ),
            error="invalid_settings",
            message="settings must be a JSON object",
        ),
        Field("speed", setting="speed", nullable=True, error="invalid_settings"),
    ),
)
CLOCK = Body(
    "clock.clock_action",
    (
        Field(
            "action",
            "choice",
            "pause, resume, or step a paused clock (may be left out when only `speed` changes)",
            choices=("pause", "resume", "step"),
            nullable=True,
            error="invalid_action",
            message="must be pause, resume or step",
        ),
        Field(
            "seconds",
            "number",
            "simulated seconds one step advances a paused clock (up to a simulated day)",
            default=30.0,
            min=0.001,
            max=86400,
            error="invalid_step",
        ),
        Field("speed", setting="speed", error="invalid_settings"),
    ),
)

# --- routes: jobs, inline, faults, DLQ ----------------------------------------------------------
JOB = Body(
    "jobs.create_job",
    (
        Field("job_type", "choice", "what the worker makes", default="transcode", choices=producer.JOB_TYPES),
        Field(
            "sample",
            "choice",
            "one of the lab's sample clips (or the poison pill)",
            default="bigbuckbunny",
            choices=tuple(SAMPLES),
        ),
        Field(
            "duration_s",
            setting="job_duration",
            doc="simulated duration of this job (default: the lab's `job_duration`)",
        ),  # default: the lab's job_duration
    ),
    error="invalid_job",
)
INLINE = Body(
    "inline.inline_transcode",
    (
        Field(
            "sample",
            "choice",
            "a real clip to transcode inside the request",
            default="bigbuckbunny",
            choices=tuple(s for s in SAMPLES if s != "poison"),
            error="unknown_sample",
        ),
        Field(
            "duration_s",
            setting="job_duration",
            doc="simulated duration of the inline job (default: the lab's "
            "`job_duration`); the request is held that long unless the gateway times out first",
        ),
    ),
    error="invalid_job",
)
FAULT = Body(
    "faults.inject_fault",
    (
        Field("type", "choice", "the fault", choices=tuple(FAULTS), required=True),
        Field(
            "duration_s",
            "number",
            "simulated seconds the fault lasts (up to a simulated day; the poison pill is one job and ignores it)",
            default=120.0,
            min=1,
            max=86400,
        ),
    ),
    error="invalid_fault",
)
CHALLENGE = Body(
    "challenges.run_challenge",
    (
        Field(
            "challenge",
            "choice",
            "which challenge (GET /api/challenges lists them)",
            choices=tuple(chapters.CHALLENGES),
            required=True,
            error="unknown_challenge",
            status=404,
        ),
        Field(
            "code",
            "string",
            "the handler: Python defining `handle(ctx)` (core/challenges/runner.py documents ctx)",
            required=True,
            max_length=CODE_MAX,
            error="invalid_code",
            message=f"must be the handler's Python source, at most {CODE_MAX} characters",
        ),
    ),
)
REPLAY = Body(
    "dlq.replay_dlq",
    (
        Field(
            "reason", "string", "replay only the dead letters with this reason", nullable=True, error="invalid_reason"
        ),
        Field(
            "rate",
            "number",
            "pace the replay at this many jobs per simulated second (left out: all at once)",
            min=0.001,
            max=1000,
            nullable=True,
            error="invalid_rate",
            message="must be a number of jobs per simulated second, 0.001–1000 (omit it for an unpaced replay)",
        ),
    ),
)

# --- chapter blueprints ----------------------------------------------------------------------
MAX_BATCH = 500  # the lesson's burst size is the ceiling for one call
MAX_POISON = 20  # each costs up to POISON_CRASHES worker restarts: enough for a storm, not a siege
FAIR_JOBS = Body(
    "fairness.submit_jobs",
    (
        TIER,
        Field("count", "int", "jobs to queue", default=1, min=1, max=MAX_BATCH),
        Field(
            "customer",
            "string",
            "1–16 letters or digits (default: the tier's first customer, p1 or f1)",
            min_length=1,
            max_length=16,
            check=_letters_or_digits,
            message="must be 1–16 letters or digits",
        ),
    ),
)
FAIR_NOISY = Body(
    "fairness.noisy_neighbour",
    (
        Field("burst", "int", "jobs the noisy free customer drops at once", default=60, min=1, max=MAX_BATCH),
        Field("others", "int", "quiet free customers who then submit one job each", default=9, min=0, max=50),
    ),
)
FAIR_POISON = Body(
    "fairness.poison",
    (
        TIER,
        Field("count", "int", "poison jobs to queue", default=3, min=1, max=MAX_POISON),
    ),
)
FAIR_SPIKE = Body(
    "fairness.spike",
    (
        TIER,
        Field(
            "duration_s", "int", "simulated seconds the tier's arrival rate stays doubled", default=300, min=1, max=7200
        ),
    ),
)

LOADGEN_ACTIONS = ("start", "stop", "rate", "peak", "unpeak")
MAX_RATE = 5.0  # simulated jobs/s: ~150 jobs in flight at W = 30 s, the lab's in-flight bound
LOADGEN = Body(
    "loadgen.control_loadgen",
    (
        Field(
            "action",
            "choice",
            "start (rate, seed), stop, change the rate, or step to the peak and back",
            choices=LOADGEN_ACTIONS,
            required=True,
            error="invalid_action",
        ),
        Field(
            "rate",
            "number",
            "Poisson arrivals per simulated second (start: default 0.1; rate: required)",
            above=0,
            max=MAX_RATE,
            nullable=True,
            error="invalid_rate",
            message=f"must be a number of jobs/s in (0, {MAX_RATE:g}]",
        ),
        Field(
            "seed",
            "int",
            "seed of the arrival draws, so a run can be repeated",
            default=1,
            min=0,
            max=2**31 - 1,
            error="invalid_seed",
            message="must be a whole number in [0, 2^31)",
        ),
        Field(
            "mix",
            "choice",
            "job times on start: lesson (the lesson's blend, W = 30 s) or even (every job W)",
            choices=tuple(loadgen.MIXES),
            default="lesson",
            error="invalid_mix",
        ),
    ),
)
SCHEDULE = Body(
    "schedule.control_schedule",
    (
        Field(
            "action",
            "choice",
            "kill a replica, take every replica down, make the next run slow, or reset",
            choices=("kill", "down", "slow", "reset"),
            required=True,
            error="invalid_action",
        ),
        Field(
            "replica",
            "string",
            "r1, r2, …, or leader / holder",
            error="unknown_replica",
            message="name a replica of this lab (r1, r2, …), leader or holder",
        ),
        Field(
            "duration_s",
            "number",
            "simulated seconds: how long `down` lasts (default 300) or the slow run takes "
            "(default three task durations)",
            min=1,
            max=7200,
            error="invalid_duration",
            message="must be simulated seconds in [1, 7200]",
        ),
    ),
)
MAX_FAILS = 10
WEBHOOK = Body(
    "webhooks.register",
    (
        Field(
            "url",
            "string",
            '"builtin" (the lab\'s own receiver) or an absolute http(s) URL',
            required=True,
            min_length=1,
            max_length=2000,
            message='send "builtin" or an absolute http(s) URL',
        ),
        Field(
            "fail_times",
            "int",
            "the built-in receiver answers 500 to this many deliveries first",
            default=0,
            min=0,
            max=MAX_FAILS,
            message=f"must be a whole number 0–{MAX_FAILS}",
        ),
    ),
    error="invalid_webhook",
)

ROOM_CLIENT = r"^[A-Za-z0-9_-]{8,40}$"
ROOM = Body(
    "rooms.create_room",
    (
        Field(
            "scenario",
            "choice",
            "start the room from a ready-made scenario",
            choices=tuple(chapters.SCENARIOS),
            nullable=True,
            error="invalid_scenario",
        ),
        Field(
            "preset",
            "choice",
            "the chapter preset of a fresh room lab (without `scenario` or `lab_id`; "
            f"default {chapters.DEFAULT_PRESET})",
            choices=tuple(links.room_presets()),
            error="invalid_preset",
        ),
        Field("speed", setting="speed", error="invalid_settings"),
        Field(
            "lab_id",
            "string",
            "open the room on this lab of yours (send its token as Bearer)",
            max_length=32,
            error="unknown_lab",
            status=404,
            message="no such lab",
        ),
        Field(
            "view_token",
            "string",
            "that lab's view token, handed to the students",
            error="invalid_view_token",
            message="must be this lab's view token",
        ),
    ),
)
FOLLOW = Body(
    "rooms.follow_room",
    (
        Field(
            "name", "string", "the student's name the instructor sees", default="", max_length=40, error="invalid_name"
        ),
    ),
)
PRESENCE = Body(
    "rooms.room_presence",
    (
        Field(
            "client",
            "string",
            "this page's seat (POST /api/rooms/{code}/members)",
            required=True,
            pattern=ROOM_CLIENT,
            error="invalid_client",
            message="must be 8–40 letters, digits, - or _",
        ),
        Field(
            "lab_id",
            "string",
            "the lab this page shows, if it is the room's or a student's",
            nullable=True,
            error="invalid_lab",
            message="must be a lab id",
        ),
    ),
)
_ROUND_N = Field(
    "n",
    "int",
    "the open question's number (GET /api/rooms/{code}/round)",
    required=True,
    min=1,
    max=2**31,
    error="no_round",
    status=409,
    message="that question is no longer open; reload the page",
)
ROUND = Body(
    "rooms.open_round",
    (
        Field(
            "prediction",
            "string",
            "one of the prediction questions of the room's chapter (GET /api/meta)",
            required=True,
            max_length=64,
            error="invalid_prediction",
            message="must be a prediction of this chapter",
        ),
    ),
)
GUESS = Body(
    "rooms.round_guess",
    (
        Field(
            "client",
            "string",
            "this page's seat (POST /api/rooms/{code}/members): one guess per seat",
            required=True,
            pattern=ROOM_CLIENT,
            error="invalid_client",
            message="must be 8–40 letters, digits, - or _",
        ),
        _ROUND_N,
        Field(
            "value",
            "json",
            "the guess: a whole number in the question's range, or one of its choices",
            required=True,
            error="invalid_guess",
            message="must be a whole number or one of the question's choices",
        ),
    ),
)
ROUND_RESULT = Body(
    "rooms.round_result",
    (
        _ROUND_N,
        Field(
            "measured",
            "json",
            "what the instructor's lab measured: a whole number, or one of the choices",
            required=True,
            error="invalid_result",
            message="must be a whole number or one of the question's choices",
        ),
        Field(
            "why",
            "string",
            "a sentence on why it came out so (shown beside the class's guesses)",
            default="",
            max_length=600,
            error="invalid_result",
            message="must be text of at most 600 characters",
        ),
    ),
)
ROOM_RACE = Body(
    "rooms.room_race",
    (
        Field(
            "race_id",
            "string",
            "a race that is still running (POST /api/races)",
            required=True,
            pattern=r"^[A-Za-z0-9_-]{16}$",
            error="invalid_race",
            message="must be a race that is still running",
        ),
    ),
)
