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

from collections import Counter

import gevent
from gunicorn.workers.base_async import AsyncWorker
from gunicorn.workers.ggevent import GeventWorker

from core.config import Config


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
        from app.routes.pages import warm

        gevent.spawn(warm, self.wsgi)  # every chapter rendered once, in the background

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
