"""The health routes: `/healthz` for the launcher and load balancer, `/metrics` for Prometheus."""

from __future__ import annotations

import hmac
import os
import shutil

import redis
from flask import Blueprint, current_app, jsonify

from app.auth import bearer_token
from app.errors import ApiError
from app.store import get_redis
from core import archive, hosts, parking, registry, sandbox
from core.disk import persist_refused
from core.keys import LABS, host_running

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    """Web is up if this answers; Redis reachability is checked, not assumed. `master` is the pid of the
    gunicorn master this worker was forked from: the launcher starts only when it hears its own. `sandbox` is
    "ok" where ffmpeg runs in its namespaces, else why not (it then runs with rlimits only; core/sandbox.py).
    A full disk does not make it unhealthy (restarting would not help, and reads still work), but it says why
    changes are refused: `disk` (VAR_DIR's free bytes), `writes` ("ok", or "refused: …") and `why`."""
    r = get_redis()
    why: list[str] = []
    try:
        try:
            r.ping()
        except redis.ResponseError as e:  # the server answers PING with MISCONF while it cannot persist
            if not persist_refused(e):
                raise
        redis_state = "ok"
        try:
            persistence = r.info("persistence")
        except redis.ResponseError:  # a role whose ACL leaves INFO out (docs/deploy.md): persistence unknown
            persistence = {}
        for what, field in (("AOF write", "aof_last_write_status"), ("snapshot", "rdb_last_bgsave_status")):
            if persistence.get(field, "ok") != "ok":
                why.append(f"the lab server's last {what} failed (is its disk full?): it refuses changes")
    except redis.RedisError as e:
        redis_state = f"error: {e.__class__.__name__}"
        why.append("the lab server does not answer")
    var_dir = current_app.config["LAB"].var_dir
    free = shutil.disk_usage(next(p for p in (var_dir, *var_dir.parents) if p.exists())).free
    if free < current_app.config["LAB"].max_upload_bytes:
        why.append(f"VAR_DIR has {free} bytes free, less than one upload: uploads and outputs fail")
    ok = redis_state == "ok"
    return jsonify(
        ok=ok,
        web="ok",
        redis=redis_state,
        master=os.getppid(),
        disk={"var_dir_free_bytes": free},
        writes="refused: " + "; ".join(why) if why else "ok",
        why=why,
        sandbox=sandbox.unavailable() or "ok",
    ), 200 if ok else 503


@bp.get("/metrics")
def metrics():
    """Prometheus text format. Without the METRICS_TOKEN (Authorization: Bearer) only machine-wide totals,
    never a lab id; with it, each live lab's counts labelled by lab."""
    r = get_redis()
    want = current_app.config["LAB"].metrics_token
    given = bearer_token() or ""
    per_lab = bool(want) and hmac.compare_digest(want.encode(), given.encode())
    if given and not per_lab:
        raise ApiError(403, "forbidden", "this is not the metrics token")
    labs = sorted(r.smembers(LABS))
    samples: dict[str, list[str]] = {}
    totals: dict[str, int] = {}
    for lab in labs:
        for name, value in registry.counts(r, lab).items():
            totals[name] = totals.get(name, 0) + value
            if per_lab:
                samples.setdefault(name, []).append(f'asyncworklab_{name}{{lab="{lab}"}} {value}')
    parked = len(parking.parked(r) & set(labs))
    lines = [
        "# TYPE asyncworklab_labs gauge",
        f"asyncworklab_labs {len(labs)}",
        "# TYPE asyncworklab_labs_running gauge",
        f"asyncworklab_labs_running {len(labs) - parked}",
        "# TYPE asyncworklab_labs_parked gauge",
        f"asyncworklab_labs_parked {parked}",
        "# TYPE asyncworklab_processes gauge",
        f"asyncworklab_processes {running_processes(r)}",
    ]
    folding = archive.stats(r)  # parked labs past PARKED_MEMORY are folded (core/archive.py)
    lines += [
        "# TYPE asyncworklab_labs_folded gauge",
        f"asyncworklab_labs_folded {folding['archived']}",
        "# TYPE asyncworklab_parked_bytes gauge",
        f"asyncworklab_parked_bytes {folding['parked_bytes']}",
        "# TYPE asyncworklab_folded_bytes gauge",
        f"asyncworklab_folded_bytes {folding['archived_bytes']}",
    ]
    if per_lab:
        for name, rows in samples.items():
            lines += [f"# TYPE asyncworklab_{name} gauge", *rows]
    else:
        for name, value in totals.items():
            lines += [f"# TYPE asyncworklab_{name}_total gauge", f"asyncworklab_{name}_total {value}"]
    return "\n".join(lines) + "\n", 200, {"Content-Type": "text/plain; version=0.0.4"}


def running_processes(r: redis.Redis) -> int:
    """Lab processes (rq workers, scheduler replicas) the live pool hosts report running now: what really
    runs, not what the labs' settings ask for."""
    hosts_now = sorted(hosts.live_hosts(r))
    return sum(int(n or 0) for n in r.mget([host_running(h) for h in hosts_now])) if hosts_now else 0
