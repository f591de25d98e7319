"""The web tier's gunicorn worker: gevent (a greenlet per connection, no thread per socket), with
bounds so one client cannot hold the process.

- a client (IP address) may hold at most `CONN_PER_CLIENT` TCP connections; more are closed on accept
  (only without a proxy: behind one every client has the proxy's address);
- a request's headers must arrive within `HEADER_TIMEOUT` s (slowloris), an idle keep-alive connection
  is closed after the same time, and a body (or a response the client stops reading) that stalls for
  `BODY_TIMEOUT` s closes the connection.

An open WebSocket costs a couple of greenlets and a mailbox (see app/routes/ws.py), so a thousand of them fit
in one process, and `/healthz`, pages and API calls are served alongside whatever one client holds.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

import gevent
import redis
from gunicorn.http import errors as http_errors
from gunicorn.workers.base_async import AsyncWorker
from gunicorn.workers.ggevent import GeventWorker

from core.config import Config

# A request gunicorn refuses before the app sees it, answered as the API answers (`{error, detail}` in JSON),
# not with gunicorn's HTML page: status, reason, error code. Any other parse error is a plain 400.
REFUSED: dict[type[Exception], tuple[int, str, str]] = {
    http_errors.LimitRequestLine: (414, "URI Too Long", "uri_too_long"),
    http_errors.LimitRequestHeaders: (431, "Request Header Fields Too Large", "headers_too_large"),
    http_errors.ExpectationFailed: (417, "Expectation Failed", "expectation_failed"),
    http_errors.UnsupportedTransferCoding: (501, "Not Implemented", "unsupported_transfer_coding"),
    http_errors.ForbiddenProxyRequest: (403, "Forbidden", "forbidden_proxy"),
}


def refusal(exc: Exception) -> bytes:
    """The whole HTTP response for a request gunicorn could not parse (the connection then closes)."""
    status, reason, error = next(
        (answer for kind, answer in REFUSED.items() if isinstance(exc, kind)), (400, "Bad Request", "bad_request")
    )
    body = json.dumps({"error": error, "detail": str(exc)}).encode()
    head = f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
    return head.encode("latin-1") + f"Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body


class LabGeventWorker(GeventWorker):
    def init_process(self):
        cfg = Config.from_env()
        self.conn_cap = cfg.conn_per_client if not cfg.trusted_proxies else 0
        self.header_timeout = cfg.header_timeout
        self.body_timeout = cfg.body_timeout
        self.held: Counter[str] = Counter()
        super().init_process()

    def load_wsgi(self):
        super().load_wsgi()
        from app import idempotency
        from app.routes.pages import warm

        gevent.spawn(warm, self.wsgi)  # every chapter rendered once, in the background
        gevent.spawn(idempotency.heartbeat, redis.Redis.from_url(Config.from_env().redis_url, socket_timeout=5))

    def timeout_ctx(self):
        """Wraps reading each request's headers (the keep-alive loop): too slow → close, silently."""
        return gevent.Timeout(self.header_timeout, False)

    def handle(self, listener, client, addr):
        ip = addr[0] if isinstance(addr, tuple) and addr else str(addr)
        if self.conn_cap and self.held[ip] >= self.conn_cap:
            client.close()
            return
        self.held[ip] += 1
        try:
            client.setblocking(1)
            client.settimeout(self.body_timeout)  # a stalled read or write raises → connection closed
            AsyncWorker.handle(self, listener, client, addr)
        finally:
            self.held[ip] -= 1
            if self.held[ip] <= 0:
                del self.held[ip]

    def handle_quit(self, sig, frame):
        """Quit at once (Ctrl-C, the master's quick stop), as gunicorn's worker does, without the `SystemExit`
        traceback gevent prints for the greenlet gunicorn's gevent worker calls `sys.exit` in: a web process
        holds nothing an orderly interpreter exit would save (its claims lapse with its heartbeat)."""
        self.alive = False
        self.cfg.worker_int(self)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def handle_error(self, req, client, addr, exc):
        """A request line or headers gunicorn refuses (too long, malformed): the same JSON as every API error."""
        if not isinstance(exc, http_errors.ParseException) or isinstance(exc, http_errors.ConfigurationProblem):
            super().handle_error(req, client, addr, exc)
            return
        self.log.warning("Invalid request from ip=%s: %s", addr[0] if addr else "", exc)
        try:
            client.sendall(refusal(exc))
        except OSError:
            self.log.debug("Failed to send error message.")
