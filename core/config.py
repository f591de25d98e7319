"""Process configuration from environment variables, with defaults that work on a laptop.

Every tunable a deployer may set lives here, once; lab *settings* (what a learner changes)
live in `core.settings` instead. The pool supervisor's own timings, which no deployer sets, close the
file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


@dataclass
class Config:
    """What one web or pool process needs to know; `from_env()` reads it."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    """The Redis-protocol server every process shares (labs, RQ queues, event streams)."""
    port: int = 8000
    """Port the web process listens on."""
    host: str = "127.0.0.1"
    """Interface the web process binds; set HOST=0.0.0.0 for a classroom on the local network."""
    public_url: str = ""
    """How other machines reach this web tier (e.g. http://10.0.0.3:8000): the address the launcher prints and
    the webhook deliverer posts a lab's own receiver to. Empty: http://HOST:PORT (127.0.0.1 for 0.0.0.0)."""
    server_bind: str = "127.0.0.1"
    """Address the embedded Redis-protocol server listens on (only that one). On several machines: the
    server machine's own address, with the three passwords below set."""
    server_port: int = 0
    """Port of the embedded server (0: a free one; set it when other machines must find it)."""
    web_password: str = ""
    """Password of the server's ACL user `web` (web processes: REDIS_URL=redis://web:…@server:port/0). Setting
    any of the three passwords turns the server's ACL on: the default user is switched off, and a user whose
    password is unset cannot log in."""
    pool_password: str = ""
    """Password of the ACL user `pool` (pool hosts: the supervisor, its rq workers and their horses)."""
    admin_password: str = ""
    """Password of the ACL user `admin` (every command; the operator's and the launcher's own checks)."""
    speed: float = 20.0
    """Default simulated seconds per real second for new labs (the lesson's demo runs at 20x)."""
    max_upload_bytes: int = 20 * 1024 * 1024
    """Largest video upload accepted; larger requests get 413 before they reach a worker."""
    max_lab_bytes: int = 256 * 1024 * 1024
    """Bytes one lab's uploads and outputs may take (blobs in the server); an upload past it gets 413."""
    max_blob_bytes: int = 1024 * 1024 * 1024
    """Bytes every lab's uploads and outputs together may take in the Redis-protocol server (core.blobs)."""
    client_blob_share: float = 0.125
    """Share of `max_blob_bytes` one client (IP address) may hold across all its labs: its uploads and the
    outputs its labs' jobs write. Past it that client's uploads answer 507 and its jobs' outputs are
    refused (dead-lettered, counted), while every other client's still fit. 1: no per-client budget."""
    server_max_memory: int = 0
    """`maxmemory` of the embedded Redis-protocol server the launcher starts (policy noeviction: a write
    past it is refused, the API answers 507 with the reason, and nothing stored is ever evicted).
    0: `max_blob_bytes` plus 512 MiB for labs' records and event streams."""
    reconcile_s: float = 30.0
    """Real seconds between two runs of the pool's reconcile (workers/reconcile.py: processes and keys of
    deleted labs, the byte counters, the AOF's size), across every pool host sharing the server."""
    pool_host_id: str = ""
    """This pool host's name in the host registry (empty: the server hands out p1, p2, …)."""
    pool_lease_s: float = 3.0
    """Real seconds a pool host's lease on a lab (and its own registry entry) lasts without a heartbeat:
    a silent host's labs move within about this long, plus worker start-up. Heartbeats every third of it."""
    max_labs: int = 40
    """Labs *running* at once on this deployment (each holds worker processes; parked labs do not count:
    they are bounded by `parked_memory`). Opening or resuming one more first parks labs nobody has looked at for
    a while (core/parking.py `quiet`); only if every lab is in use does it answer 429 `labs_full`. 0: no cap."""
    parked_memory: int = 128 * 1024 * 1024
    """Bytes parked labs may hold unfolded in the Redis-protocol server (their records, events and RQ keys;
    uploads and outputs are `max_blob_bytes`'). Past it the supervisor folds the least recently used parked
    labs into one compressed value each (core/archive.py), unfolded with their history when their page opens
    again. 0: never fold."""
    max_client_live_labs: int = 40
    """Labs one client (IP address) may keep alive at once, parked ones included (each lane of a race is one
    lab); opening one more answers 429 `client_labs_kept` until one is closed or expires. One reader walking
    every chapter and every race keeps 20 (nine chapters, eleven race lanes). 0: unlimited."""
    lab_idle_ttl: int = 14 * 24 * 3600
    """Real seconds without activity after which a lab is removed with its keys, files and workers. Two weeks:
    a term's weekly classes find every lab as they left it (a browser remembers its labs, widget/util.js
    `labStore`); parked labs cost bytes, bounded by `parked_memory` and `max_blob_bytes`, not running slots."""
    max_workers: int = 128
    """Processes all labs together may run on this machine: rq workers *and* chapter 7's scheduler replicas
    (chapter 6's fleets are workers); a lab, resize or replica count past it answers 429. A chapter's lab runs
    1–4 (2.7 on average), so a class of 30 at their pages at once asks for about 80, and 120 when all are on
    chapter 2 (`bench term`); each idle worker holds about 50 MB, so the ceiling is also about 6 GB of memory."""
    spare_workers: int = 3
    """Pre-started worker processes each pool host keeps ready (Python, RQ and the job code loaded, no lab
    yet): a new lab's workers and a killed worker's replacement are taken from them and ready in
    milliseconds, not after a process start (workers/spare.py). They belong to the host, not to a lab, and
    are not counted against `max_workers`. 0: start every worker on demand."""
    rate_jobs: int = 120
    """Job creations one client (IP address) may make per `rate_window`; more answer 429. 0: unlimited."""
    rate_kills: int = 30
    """Worker kills one client may ask for per `rate_window`; more answer 429. 0: unlimited."""
    rate_challenge_runs: int = 6
    """Challenge runs (a learner's handler on a workload, POST …/challenge) one client may start per `rate_window`;
    more answer 429. 0: unlimited."""
    challenge_cpu_s: float = 20.0
    """CPU seconds all the sandboxed attempts of one challenge run may use together (each attempt is also held to
    core/challenges/box.py's limits); past it the run ends with that error."""
    rate_window: int = 60
    """Length in real seconds of the fixed window the per-client rate limits count in."""
    rate_labs: int = 20
    """Labs and rooms one client may open per `rate_window` (new, branched, follow-along, room; a race of four
    is four); more answer 429. A reader who opens every chapter and a race of four within a minute opens 13;
    seven races of four would be 28. 0: unlimited."""
    max_client_labs: int = 4
    """Labs one client may *run* at once (each costs worker processes; a parked lab does not count). Opening
    or resuming one more first parks that client's own labs no page watches (oldest first); only if every
    one is watched it answers 429 `client_labs_full`, listing them. 0: unlimited."""
    park_after: float = 60.0
    """Real seconds a lab may go unwatched (no open WebSocket on any web process, no call from its owner)
    before it is parked: its processes stop and free their slots, its jobs, events, outputs and settings
    stay, and opening its page again resumes it (core/parking.py). 0: never park."""
    rate_room_lookups: int = 30
    """Unknown room codes one client may try per `rate_window`; past it every room lookup from that
    client answers 429 (so a 10-letter code, 32^10 ≈ 10^15, cannot be guessed). 0: unlimited."""
    rate_room_seats: int = 60
    """Room seats (POST /api/rooms/{code}/members) one client may take per `rate_window`, across rooms; more
    answer 429. A page keeps its seat for the tab, so a reload takes none; a class behind one NAT address
    without a proxy (see `trusted_proxies`) shares this budget. 0: unlimited."""
    room_viewers_per_client: int = 100
    """Viewers one client (IP address) may be of one room at once (of its 1,000), so one address cannot fill
    a room however long it mints seats; more answer 429 `room_client_full`. 0: no per-client cap."""
    lab_batch_jobs: int = 2000
    """Batch jobs (chapter 6's tier jobs, bursts, poison) one lab may queue per `rate_window`; more
    answer 429, so one lab's flood cannot hold the machine's workers and forks. 0: unlimited."""
    lab_late_deliveries: int = 30
    """Late deliveries (POST …/late-delivery) one lab may ask for per `rate_window`. 0: unlimited."""
    lab_job_rate: float = 20.0
    """Jobs per *real* second chapter 2's load generator may create in one lab, whatever its clock speed
    (5 jobs/simulated s at 1000× would otherwise be 5,000 forks a second)."""
    lab_nice: int = 2
    """Base nice level of every lab process (rq workers and their horses and ffmpeg, scheduler replicas):
    the web tier, supervisor and Redis-protocol server always outrank lab work. Each lab's processes
    are niced further by log1.25 of their count, so a lab's share of CPU does not grow with its workers."""
    max_json_bytes: int = 64 * 1024
    """Largest JSON request body; bigger answers 413 before it is parsed."""
    max_json_depth: int = 32
    """Deepest nesting of arrays/objects accepted in a JSON body; deeper answers 400 (never a 500)."""
    metrics_token: str = ""
    """Bearer token that opens per-lab series on /metrics. Unset: /metrics shows machine-wide totals only,
    never a lab id."""
    max_video_pixels: int = 3840 * 2160
    """Largest frame (width × height) ffmpeg will decode: a 30000×30000 header cannot exhaust memory."""
    ffmpeg_timeout: float = 120.0
    """Real seconds any one ffmpeg run may take before it is killed and the job dead-lettered."""
    max_output_bytes: int = 64 * 1024 * 1024
    """Largest file one transcode may write (ffmpeg `-fs`)."""
    var_dir: Path = field(default_factory=lambda: ROOT / "var")
    """Where uploads, transcoded outputs and the embedded server's data live."""
    access_log: str = ""
    """Where gunicorn writes its access log ("-" for stdout; empty: none). Tokens are redacted."""
    secret_key: str = ""
    """Flask secret (signs nothing security-critical; tokens are random and checked in Redis)."""
    long_poll_max: int = 32
    """Long-polls this web process holds at once. Each holds a blocking server connection, so the cap
    keeps held polls from starving everything else of connections; beyond it: 503."""
    long_poll_per_lab: int = 12
    """Long-polls one lab may hold at once, so one lab cannot take the whole budget; beyond it: 429."""
    long_poll_per_client: int = 12
    """Long-polls one client (IP address) may hold at once across all its labs (by default one lab's worth),
    so one address with a few labs cannot take every slot of `long_poll_max` from everyone else; beyond it:
    429 (the page falls back to plain polling). 0: no per-client cap."""
    webhook_allowlist: tuple[str, ...] = ()
    """URL prefixes a webhook may target despite resolving to a private or loopback address. Empty in
    any real deployment; the test suite sets it to one loopback port it owns (WEBHOOK_TEST_ALLOWLIST)."""
    trusted_proxies: int = 0
    """Reverse proxies in front of the web process whose X-Forwarded-For/-Proto/-Host to believe. Behind
    one, every student would otherwise be the proxy's address: one rate-limit budget for the whole room,
    and join links and QR codes with the proxy's inner host. 0 (no proxy): the headers are ignored, since
    anyone can send them."""
    ws_per_client: int = 64
    """WebSockets one client (IP address) may hold open at once; one more is accepted and closed at once
    with code 4429 and the reason (the widget shows it). 0: unlimited."""
    ws_per_lab: int = 400
    """WebSockets one lab may have open at once (watchers of a room included); beyond it: close 4429."""
    conn_per_client: int = 512
    """TCP connections one client may hold open on the web process (slow requests, idle keep-alives,
    sockets); more are closed on accept. Only without a proxy (TRUSTED_PROXIES=0): behind one every
    client shares its address, and the WebSocket caps above still count per forwarded client."""
    header_timeout: float = 10.0
    """Real seconds a client has to send a request's headers (slowloris); then the connection is closed."""
    body_timeout: float = 15.0
    """Real seconds a request body may stall between two reads before the connection is closed."""
    testing: bool = False

    @property
    def client_blob_bytes(self) -> int:
        """Bytes one client's labs may hold together (`client_blob_share` of `max_blob_bytes`)."""
        return int(self.max_blob_bytes * min(1.0, max(0.0, self.client_blob_share)))

    @property
    def self_url(self) -> str:
        """This web tier's address as other processes reach it (`public_url`, else HOST:PORT)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return (self.public_url or f"http://{host}:{self.port}").rstrip("/")

    @property
    def redis_maxmemory(self) -> int:
        return self.server_max_memory or self.max_blob_bytes + 512 * 1024 * 1024

    @classmethod
    def from_env(cls) -> Config:
        return cls(
            redis_url=os.environ.get("REDIS_URL") or cls.redis_url,
            port=_int("PORT", cls.port),
            host=os.environ.get("HOST") or cls.host,
            public_url=os.environ.get("PUBLIC_URL", ""),
            server_bind=os.environ.get("SERVER_BIND") or cls.server_bind,
            server_port=_int("SERVER_PORT", cls.server_port),
            web_password=os.environ.get("REDIS_WEB_PASSWORD", ""),
            pool_password=os.environ.get("REDIS_POOL_PASSWORD", ""),
            admin_password=os.environ.get("REDIS_ADMIN_PASSWORD", ""),
            speed=_float("SPEED", cls.speed),
            max_upload_bytes=_int("MAX_UPLOAD_BYTES", cls.max_upload_bytes),
            max_lab_bytes=_int("MAX_LAB_BYTES", cls.max_lab_bytes),
            max_blob_bytes=_int("MAX_BLOB_BYTES", cls.max_blob_bytes),
            client_blob_share=_float("CLIENT_BLOB_SHARE", cls.client_blob_share),
            server_max_memory=_int("SERVER_MAX_MEMORY", cls.server_max_memory),
            reconcile_s=_float("RECONCILE_S", cls.reconcile_s),
            pool_host_id=os.environ.get("POOL_HOST_ID", ""),
            pool_lease_s=_float("POOL_LEASE_S", cls.pool_lease_s),
            max_labs=_int("MAX_LABS", cls.max_labs),
            parked_memory=_int("PARKED_MEMORY", cls.parked_memory),
            max_client_live_labs=_int("MAX_CLIENT_LIVE_LABS", cls.max_client_live_labs),
            lab_idle_ttl=_int("LAB_IDLE_TTL", cls.lab_idle_ttl),
            max_workers=_int("MAX_WORKERS", cls.max_workers),
            spare_workers=_int("SPARE_WORKERS", cls.spare_workers),
            rate_jobs=_int("RATE_JOBS", cls.rate_jobs),
            rate_kills=_int("RATE_KILLS", cls.rate_kills),
            rate_window=_int("RATE_WINDOW", cls.rate_window),
            rate_challenge_runs=_int("RATE_CHALLENGE_RUNS", cls.rate_challenge_runs),
            challenge_cpu_s=_float("CHALLENGE_CPU_S", cls.challenge_cpu_s),
            rate_labs=_int("RATE_LABS", cls.rate_labs),
            max_client_labs=_int("MAX_CLIENT_LABS", cls.max_client_labs),
            park_after=_float("PARK_AFTER", cls.park_after),
            rate_room_lookups=_int("RATE_ROOM_LOOKUPS", cls.rate_room_lookups),
            rate_room_seats=_int("RATE_ROOM_SEATS", cls.rate_room_seats),
            room_viewers_per_client=_int("ROOM_VIEWERS_PER_CLIENT", cls.room_viewers_per_client),
            lab_batch_jobs=_int("LAB_BATCH_JOBS", cls.lab_batch_jobs),
            lab_late_deliveries=_int("LAB_LATE_DELIVERIES", cls.lab_late_deliveries),
            lab_job_rate=_float("LAB_JOB_RATE", cls.lab_job_rate),
            lab_nice=_int("LAB_NICE", cls.lab_nice),
            max_json_bytes=_int("MAX_JSON_BYTES", cls.max_json_bytes),
            max_json_depth=_int("MAX_JSON_DEPTH", cls.max_json_depth),
            metrics_token=os.environ.get("METRICS_TOKEN", ""),
            max_video_pixels=_int("MAX_VIDEO_PIXELS", cls.max_video_pixels),
            ffmpeg_timeout=_float("FFMPEG_TIMEOUT", cls.ffmpeg_timeout),
            max_output_bytes=_int("MAX_OUTPUT_BYTES", cls.max_output_bytes),
            var_dir=Path(os.environ.get("VAR_DIR") or ROOT / "var"),
            access_log=os.environ.get("ACCESS_LOG", ""),
            secret_key=os.environ.get("SECRET_KEY") or os.urandom(16).hex(),
            long_poll_max=_int("LONG_POLL_MAX", cls.long_poll_max),
            long_poll_per_lab=_int("LONG_POLL_PER_LAB", cls.long_poll_per_lab),
            long_poll_per_client=_int("LONG_POLL_PER_CLIENT", cls.long_poll_per_client),
            trusted_proxies=_int("TRUSTED_PROXIES", cls.trusted_proxies),
            ws_per_client=_int("WS_PER_CLIENT", cls.ws_per_client),
            ws_per_lab=_int("WS_PER_LAB", cls.ws_per_lab),
            conn_per_client=_int("CONN_PER_CLIENT", cls.conn_per_client),
            header_timeout=_float("HEADER_TIMEOUT", cls.header_timeout),
            body_timeout=_float("BODY_TIMEOUT", cls.body_timeout),
            webhook_allowlist=tuple(p for p in os.environ.get("WEBHOOK_TEST_ALLOWLIST", "").split(",") if p),
        )


NOTIFY_KEYSPACE_EVENTS = "$Khlsz"
"""The keyspace notifications the pool's loop wakes on (workers/wait.py): the embedded server starts with them, so
no role but admin needs CONFIG SET; against another server the pool asks for them if its user may."""
SERVER_MAX_CLIENTS = 50_000
"""The embedded server's connection ceiling. A busy lab holds ≈ 30 connections (its rq workers and their
subscriptions, its work horses', a share of its host's and the web's: `bench classroom`'s replay), so the
server's own default of 10,000 stops a class at ≈ 340 busy labs. The server lowers this to what its
open-files limit allows, and says so in its log."""
AOF_REWRITE_MIN = 32 * 1024 * 1024  # the embedded server rewrites no AOF below this size (nor does the reconcile)

# --- the pool supervisor's timings (workers/supervisor.py and the modules it ties together) -----------
LOOP_S = 0.02  # fallback scan interval when the server refuses keyspace notifications (workers/wait.py: Waker)
REAPER_BARRIER_S = 2.0  # real seconds the clock waits for a stalled reaper loop before going on
WORKER_READY_S = 30.0  # real seconds the clock waits for a started worker to be ready (a hung start: then goes on)
# a lease or retry due at the very moment another holder's barrier holds the clock waits for that holder (its work
# at that moment comes first); that holder's lift may leave the clock as it was and wake nobody, so the lab is looked
# at again a quarter of the wait so far later (from 1 ms), at most this many real seconds apart
TIED_LOOK_S = 0.02
REAPER_LEAD_S = 0.25  # real seconds before the clock reaches the reaper's barrier that it is moved on (duties.py)
PACING_WINDOW_S = 3.0  # real seconds over which the clock's achieved speed is measured
HOUSEKEEP_S = 0.1  # a lab whose engines run on time (load generator, fairness, autoscale, drains, faults)
# a lab with work in flight: the pacing readout's sample (from the clock hash in hand, no read), and how late a pass
# may come after a duty falls due (a lapsed barrier, an old hand-off or delivery) or once the clock waits at a barrier
MAINTAIN_S = 1.0
# a lab with work in flight and nothing due: a pass anyway, a net under what its deadlines and notifications cover
# (a job's end is not one: the lab comes to rest at its next pass)
INFLIGHT_S = 5.0
SPARE_REFILL_S = 2.0  # real seconds after a spare worker was taken before the host starts replacements
STOP_GRACE_S = 2.0  # real seconds a warm-stopped worker holding no job may take to exit before it is killed
