"""littles: Little's law on real workers: L sampled from the in-flight gauge vs λ × W from job records.

Chapter 2's load generator (Poisson arrivals, the lesson's mix, seed fixed) runs for GEN_S
simulated seconds at each λ on a 4-worker pool at the widget's default speed (20×). L is the mean
of the lab's in-flight gauge (queued + running) sampled every SAMPLE_S real seconds during
generation (and on, until the last job is done, for the busy-period columns); λ is arrivals ÷
GEN_S; W is each arrival's measured time in system (created → its successful attempt's end),
read after every job has finished. The three come from independent measurements, so L ≈ λW is
a real check, not an identity. Beside them: the numbers model's
L = λ × 30 s, ρ, and queue wait (Erlang C) for the same λ and pool.
"""

from __future__ import annotations

import json
import statistics
import time

from bench.common import Bench, report, rnd
from core import clock
from core.engines import loadgen
from core.keys import job

NAME = "littles"
RATES = (0.05, 0.1)
WORKERS = 4
SPEED = 20.0
GEN_S = 2400.0  # simulated seconds of arrivals per rate (2 real minutes at 20×)
SAMPLE_S = 0.25


def sample_rate(b: Bench, lam: float, seed: int) -> dict:
    lab = b.lab("ch2", SPEED, workers=WORKERS)
    b.workers_ready(lab, WORKERS)
    lid = lab["lab_id"]
    b.call("POST", f"/api/labs/{lid}/loadgen", {"action": "start", "rate": lam, "seed": seed}, lab["token"])
    t0 = float(b.r.hget(loadgen.state_key(lid), "started_t"))
    gauge = []
    while clock.now(b.r, lid) < t0 + GEN_S:
        st = b.states(lab)
        gauge.append(st.get("queued", 0) + st.get("retrying", 0) + st.get("running", 0))
        time.sleep(SAMPLE_S)
    b.call("POST", f"/api/labs/{lid}/loadgen", {"action": "stop"}, lab["token"])
    ids = b.r.zrange(loadgen.arrivals_key(lid), 0, -1)
    tail = list(gauge)  # keep sampling until the last job is done: the whole busy period
    while b.states(lab).get("done", 0) < len(ids):
        st = b.states(lab)
        tail.append(st.get("queued", 0) + st.get("retrying", 0) + st.get("running", 0))
        time.sleep(SAMPLE_S)
        if clock.now(b.r, lid) > t0 + GEN_S + 12000:
            raise TimeoutError("jobs did not finish")
    t_end = clock.now(b.r, lid)
    in_sys, waits = [], []
    for i in ids:
        created = float(b.r.hget(job(lid, i), "created_at"))
        atts = sorted((json.loads(a) for a in b.r.hvals(job(lid, i) + ":attempts")), key=lambda a: a["attempt"])
        end = next(a["end"] for a in atts if a["outcome"] == "succeeded")
        in_sys.append(end - created)
        waits.append(atts[0]["start"] - created)
    n, L = len(ids), statistics.fmean(gauge)
    lam_m, W = n / GEN_S, statistics.fmean(in_sys)
    span = t_end - t0
    L_full, lam_full = statistics.fmean(tail), n / span
    model = loadgen.model(lam, WORKERS)
    counts = b.counts(lab)
    b.delete_lab(lab)
    return {
        "lambda_set": lam,
        "arrivals": n,
        "lambda_measured": rnd(lam_m, 4),
        "L_sampled": rnd(L, 2),
        "W_measured_s": rnd(W, 1),
        "lambda_x_W": rnd(lam_m * W, 2),
        "L_over_lambdaW": rnd(L / (lam_m * W), 3),
        "busy_period_s": rnd(span, 0),
        "L_busy_period": rnd(L_full, 2),
        "lambda_busy_x_W": rnd(lam_full * W, 2),
        "L_over_lambdaW_busy": rnd(L_full / (lam_full * W), 3),
        "queue_wait_s": rnd(statistics.fmean(waits), 1),
        "model_L": rnd(model["L"], 2),
        "model_rho": rnd(model["rho"], 3),
        "model_mmc_wait_s": rnd(model["mmc_wait"], 1),
        "redelivered": counts.get("redelivered", 0),
    }


def run(b: Bench) -> dict:
    rows = [sample_rate(b, lam, seed=1) for lam in RATES]
    worst = max(rows, key=lambda r: abs(1 - r["L_over_lambdaW_busy"]))
    return report(
        NAME,
        "Little's law on real workers: sampled L vs measured λ × W",
        [
            "lambda_set",
            "arrivals",
            "lambda_measured",
            "L_sampled",
            "W_measured_s",
            "lambda_x_W",
            "L_over_lambdaW",
            "busy_period_s",
            "L_busy_period",
            "lambda_busy_x_W",
            "L_over_lambdaW_busy",
            "queue_wait_s",
            "model_L",
            "model_rho",
            "model_mmc_wait_s",
            "redelivered",
        ],
        rows,
        {
            "label": "L ÷ λW over the busy period, worst rate",
            "value": worst["L_over_lambdaW_busy"],
            "baseline": "1 (Little's law)",
        },
        {"rates": RATES, "workers": WORKERS, "speed": SPEED, "gen_s": GEN_S, "sample_s": SAMPLE_S, "seed": 1},
        notes=[
            "L_sampled / lambda_measured cover only the generation window, so jobs that arrive near its end "
            "count fully in W but only partly in L (L ÷ λW < 1); the busy-period columns sample the gauge "
            "until the last job is done, where Little's law must hold",
            "W includes the real floor of each job (fork + ffmpeg on the smallest clip), so measured W can "
            "exceed the mix's 30 s; the model column is the numbers model for the set λ",
        ],
    )
