"""Async Work Lab: the Flask app factory.

One blueprint per concern, as in Flask's tutorial, each a module of `app.routes` (listed in
`app.routes.BLUEPRINTS`): `pages` (server-rendered course), the JSON contract in docs/design.md split by
resource (`labs`, `jobs`, `clock` …), and `ws` (live event push).
"""

from __future__ import annotations

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

from app.http import finish_reading_body
from core.config import Config


def create_app(config: Config | None = None) -> Flask:
    """Build the app; `config` defaults to the environment (see `core.config`)."""
    config = config or Config.from_env()
    app = Flask(__name__, template_folder="../templates", static_folder="../static")
    app.config.update(
        LAB=config,
        SECRET_KEY=config.secret_key or "dev",
        MAX_CONTENT_LENGTH=config.max_upload_bytes + 64 * 1024,
        TESTING=config.testing,
        SOCK_SERVER_OPTIONS={"ping_interval": 25},
        JSON_SORT_KEYS=False,
    )

    from app import assets, charts, errors, filters, http, store
    from app.routes import BLUEPRINTS, ws

    if config.trusted_proxies:
        n = config.trusted_proxies
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=n, x_proto=n, x_host=n)  # type: ignore[method-assign]
    store.init_app(app)
    assets.init_app(app)
    filters.init_app(app)
    charts.init_app(app)
    errors.init_app(app)
    app.before_request(http.guard_request)  # path and query values checked before any route
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    ws.init_app(app)
    app.after_request(security_headers)
    app.after_request(finish_reading_body)
    return app


CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "media-src 'self'; connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'"
)


def security_headers(resp):
    """No inline scripts, no framing (X-Frame-Options for browsers older than frame-ancestors), no
    MIME sniffing, no URL (a viewer link holds a token) sent to other sites as a Referer."""
    resp.headers.setdefault("Content-Security-Policy", CSP)
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    resp.headers.setdefault("X-Frame-Options", "DENY")
    resp.headers.setdefault("Referrer-Policy", "same-origin")
    return resp
