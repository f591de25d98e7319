"""Chapter 3's webhooks: register a callback URL for a lab, and a built-in receiver that shows arrivals.

Registration validates the target against SSRF before anything is stored (delivery checks again on
every try: see workers/engines/webhooks.py, which does the sending). The built-in receiver is the lab's own
endpoint on this server, the one target allowed to be loopback. It authenticates a caller the way any
Standard Webhooks receiver does, by the signature rather than a lab token (the sender has none), and
it de-duplicates on `webhook-id`, because at-least-once delivery means the same message can come twice.
Its "fail the next N" switch makes a receiver outage happen, so the learner watches jittered retries.
"""

from __future__ import annotations

import hmac
import json
import time

from flask import Blueprint, current_app, jsonify, request

from app import bodies
from app.auth import lab_access
from app.errors import ApiError
from app.http import json_body, parse, valid_id
from app.store import get_redis
from core import clock, registry, stream
from core.engines import webhooks
from core.keys import key
from core.webhook_targets import TargetRefused, new_secret, sign, validate_target

bp = Blueprint("webhooks", __name__)
TOLERANCE_S = 300  # the Standard Webhooks timestamp window: older or newer signed messages are replays


@bp.put("/api/labs/<lab_id>/webhook")
@lab_access(write=True)
def register(lab_id: str):
    """Register the lab's callback URL (`"builtin"` = its own receiver); answers the signing secret once.

    A URL that resolves to a private, loopback, link-local or otherwise internal address is refused (400).
    """
    body = parse(json_body(), bodies.WEBHOOK)
    url, fails = body["url"], body["fail_times"]
    if url != webhooks.BUILTIN:
        try:
            validate_target(url, current_app.config["LAB"].webhook_allowlist)
        except TargetRefused as e:
            raise ApiError(400, e.code, e.reason) from None
    r = get_redis()
    secret = new_secret()
    top = r.xrevrange(key(lab_id, "events"), count=1)
    r.hset(
        webhooks.hook(lab_id),
        mapping={"url": url, "secret": secret, "fail_times": fails, "cursor": top[0][0] if top else "0"},
    )
    r.publish(webhooks.REGISTERED, lab_id)  # every pool host's delivering thread takes the lab on now
    target = "the lab's built-in receiver" if url == webhooks.BUILTIN else url
    stream.emit(r, lab_id, "webhook.registered", clock.now(r, lab_id), target=target)
    return jsonify(url=url, secret=secret, fail_times=fails, receiver_url=webhooks.receiver_path(lab_id))


@bp.get("/api/labs/<lab_id>/webhook")
@lab_access(write=False)
def show(lab_id: str):
    """The registration (without its secret), every message with its tries, and what the receiver saw."""
    r = get_redis()
    reg = r.hgetall(webhooks.hook(lab_id))
    msgs = sorted(
        (json.loads(v) for v in r.hgetall(webhooks.messages(lab_id)).values()), key=lambda m: m["created"], reverse=True
    )
    for m in msgs:
        m.pop("body", None)
    return jsonify(
        registered=bool(reg.get("url")),
        url=reg.get("url"),
        fail_times=int(reg.get("fail_times", 0)),
        messages=msgs[: webhooks.KEEP],
        arrivals=[json.loads(a) for a in r.lrange(webhooks.arrivals(lab_id), 0, webhooks.KEEP - 1)],
    )


@bp.delete("/api/labs/<lab_id>/webhook")
@lab_access(write=True)
def unregister(lab_id: str):
    """Stop sending: the registration and any tries still due are dropped (the status endpoint remains)."""
    get_redis().delete(webhooks.hook(lab_id), webhooks.due(lab_id))
    return "", 204


def _verified(secret: str, body: bytes) -> bool:
    """Check the signature headers against the body, as any Standard Webhooks receiver would."""
    msg_id = request.headers.get("webhook-id", "")
    stamp = request.headers.get("webhook-timestamp", "")
    if not (msg_id and stamp.isdigit() and secret) or abs(time.time() - int(stamp)) > TOLERANCE_S:
        return False
    expected = sign(secret, msg_id, int(stamp), body)["webhook-signature"]
    given = request.headers.get("webhook-signature", "").split(" ")
    return any(hmac.compare_digest(expected, g) for g in given)


@bp.post("/api/labs/<lab_id>/webhook/receiver")
def receive(lab_id: str):
    """The lab's built-in webhook receiver: verifies the signature, records the arrival, answers 2xx.

    No lab token: a webhook sender has only the signing secret, so the signature is the authentication.
    An unsigned or badly signed call answers 401; while the fail switch is on it answers 500.
    """
    r = get_redis()
    if len(lab_id) > 32 or not valid_id(lab_id) or not registry.exists(r, lab_id):
        raise ApiError(404, "unknown_lab", f"no lab {lab_id!r}")
    raw = request.get_data(cache=False)
    reg = r.hgetall(webhooks.hook(lab_id))
    msg_id = request.headers.get("webhook-id", "")[:100]
    ok = _verified(reg.get("secret", ""), raw)
    try:
        payload = json.loads(raw) if ok else {}
    except ValueError:
        payload, ok = {}, False
    failing = ok and r.hincrby(webhooks.hook(lab_id), "fail_times", -1) >= 0
    if ok and not failing:
        r.hset(webhooks.hook(lab_id), "fail_times", 0)
    status = 401 if not ok else 500 if failing else 200
    duplicate = ok and not failing and not r.sadd(webhooks.seen(lab_id), msg_id)
    data = payload.get("data") or {}
    now = time.time()
    completed = data.get("completed_at")
    arrival = {
        "msg_id": msg_id,
        "type": payload.get("type"),
        "job_id": data.get("job_id"),
        "verified": ok,
        "answered": status,
        "duplicate": duplicate,
        "bytes": len(raw),
        "t_real": round(now, 4),
        "delay_ms": round((now - completed) * 1000, 1) if isinstance(completed, (int, float)) else None,
    }
    with r.pipeline(transaction=False) as pipe:
        pipe.lpush(webhooks.arrivals(lab_id), json.dumps(arrival))
        pipe.ltrim(webhooks.arrivals(lab_id), 0, webhooks.KEEP - 1)
        pipe.execute()
    if ok:  # an unsigned call is recorded but not narrated: strangers must not be able to flood the log
        stream.emit(
            r,
            lab_id,
            "webhook.received",
            clock.now(r, lab_id),
            job_id=data.get("job_id"),
            msg=msg_id,
            kind=payload.get("type"),
            verified="verified",
            status=status,
            duplicate=duplicate,
            delay_ms=arrival["delay_ms"],
            bytes=len(raw),
        )
    if status != 200:
        raise ApiError(
            status,
            "receiver_failing" if failing else "bad_signature",
            "the fail switch is on" if failing else "the webhook signature does not verify",
        )
    return jsonify(received=msg_id, duplicate=duplicate)
