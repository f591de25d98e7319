"""Keep lab tokens out of logs.

A token (or view token) is a capability: whoever reads it from a log controls or watches the lab.
Browsers put it where loggers look: the WebSocket URL (`?token=`), a viewer link (`?view=`) and
the Referer that link produces, the `Authorization` header and the lab cookie. gunicorn is told to
use `RedactingLogger`, so an access log, if a deployer turns one on, shows `token=[redacted]`.
"""

from __future__ import annotations

import re

from gunicorn.glogging import Logger

SECRET_PARAM = re.compile(r"(?i)(?<![\w-])((?:token|view|view_token)=)[^&;#\s\"']*")
SECRET_ATOM = re.compile(r"(?i)authorization|cookie")
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """`text` with the value of every token-carrying query parameter replaced."""
    return SECRET_PARAM.sub(r"\1" + REDACTED, text)


class RedactingLogger(Logger):
    """gunicorn's logger with every access-log field (request line, query, Referer, any header or
    environ variable a custom format names) passed through `redact`; auth headers and cookies dropped."""

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        return {
            k: (REDACTED if SECRET_ATOM.search(k) else redact(v)) if isinstance(v, str) else v for k, v in atoms.items()
        }
