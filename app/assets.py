"""Static files: fingerprinted, compressed once, cached for a year; and gzip for dynamic text.

At start-up every file under `static/` is read once. `url_for('static', filename='js/widget.js')`
yields `/static/js/widget.<hash>.js`, served with `Cache-Control: immutable` for a year: a warm
reload costs no request at all. No build step: ES modules' relative imports (`from './x.js'`) are
rewritten when the file is loaded to the fingerprinted names of what they import, and a module's
hash covers everything it imports (transitively), so a changed dependency changes its importers'
URLs too. Plain names (`/static/js/widget/index.js`) still work, with `no-cache` and an ETag.
Each text file is gzipped once, at start-up; dynamic text responses (HTML, JSON) are gzipped per
response when the client accepts it and the body is worth it.
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path

from flask import Flask, Response, abort, request

YEAR = 365 * 24 * 3600
_IMPORT = re.compile(r"""((?:\bimport|\bfrom|\bimport\s*\()\s*['"])(\./[^'"]+\.js)(['"])""")
_COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml")
MIN_GZIP = 1024


@dataclass
class Asset:
    path: str  # as requested without fingerprint, e.g. "js/widget.js"
    body: bytes
    gz: bytes | None
    etag: str
    mimetype: str


def _fingerprinted(path: str, digest: str) -> str:
    stem, dot, ext = path.rpartition(".")
    return f"{stem}.{digest}.{ext}" if dot else f"{path}.{digest}"


class Assets:
    def __init__(self, root: Path):
        self.root = root
        self.by_plain: dict[str, Asset] = {}
        self.by_print: dict[str, Asset] = {}
        self.url: dict[str, str] = {}  # plain path → fingerprinted path
        self.closure: dict[str, list[str]] = {}  # a module → every module it imports statically, transitively
        self.load()

    def load(self) -> None:
        raw = {p.relative_to(self.root).as_posix(): p.read_bytes() for p in sorted(self.root.rglob("*")) if p.is_file()}
        deps = {path: self._imports(path, body) for path, body in raw.items() if path.endswith(".js")}
        # what a module needs before it runs: a dynamic import() is fetched on first use, so not preloaded
        static = {path: self._imports(path, body, static_only=True) for path, body in raw.items() if path in deps}

        def closure(path: str, graph: dict[str, list[str]]) -> list[str]:
            seen, todo = set(), [path]
            while todo:
                p = todo.pop()
                if p in seen or p not in raw:
                    continue
                seen.add(p)
                todo.extend(graph.get(p, ()))
            return sorted(seen)

        for path in raw:
            h = hashlib.sha256()
            if path in deps:
                self.closure[path] = [p for p in closure(path, static) if p != path]
            for p in closure(path, deps):
                h.update(p.encode() + b"\0" + raw[p])
            self.url[path] = _fingerprinted(path, h.hexdigest()[:12])
        for path, body in raw.items():
            if path in deps:
                body = self._rewrite(path, body)
            mimetype = mimetypes.guess_type(path)[0] or "application/octet-stream"
            if mimetype == "text/javascript":
                mimetype = "application/javascript"
            gz = None
            if mimetype.startswith(_COMPRESSIBLE) and len(body) >= MIN_GZIP:
                gz = gzip.compress(body, 9, mtime=0)
            asset = Asset(path, body, gz, '"' + hashlib.sha256(body).hexdigest()[:16] + '"', mimetype)
            self.by_plain[path] = asset
            self.by_print[self.url[path]] = asset

    @staticmethod
    def _imports(path: str, body: bytes, static_only: bool = False) -> list[str]:
        base = path.rpartition("/")[0]
        return [
            ((base + "/") if base else "") + m.group(2)[2:]
            for m in _IMPORT.finditer(body.decode("utf-8"))
            if not (static_only and m.group(1).rstrip("'\" ").endswith("("))
        ]

    def _rewrite(self, path: str, body: bytes) -> bytes:
        base = path.rpartition("/")[0]

        def sub(m: re.Match) -> str:
            target = ((base + "/") if base else "") + m.group(2)[2:]
            printed = self.url.get(target)
            if printed is None:
                return m.group(0)
            rel = printed[len(base) + 1 :] if base else printed  # keeps a sub-folder: ./widget/util.<hash>.js
            return f"{m.group(1)}./{rel}{m.group(3)}"

        return _IMPORT.sub(sub, body.decode("utf-8")).encode()

    def preloads(self, *modules: str) -> list[str]:
        """Every module these import, transitively, once each (plain paths for `url_for`): as
        `<link rel="modulepreload">` they are fetched at once, not one import level after another."""
        return list(dict.fromkeys(p for m in modules for p in self.closure.get(m, ()) if p not in modules))

    def serve(self, filename: str) -> Response:
        asset, immutable = self.by_print.get(filename), True
        if asset is None:
            asset, immutable = self.by_plain.get(filename), False
        if asset is None:
            abort(404)
        if not immutable and request.headers.get("If-None-Match") == asset.etag:
            resp = Response(status=304)
        else:
            use_gz = asset.gz is not None and "gzip" in request.headers.get("Accept-Encoding", "")
            resp = Response(asset.gz if use_gz else asset.body, mimetype=asset.mimetype)
            if use_gz:
                resp.headers["Content-Encoding"] = "gzip"
        resp.headers["ETag"] = asset.etag
        resp.headers["Vary"] = "Accept-Encoding"
        resp.headers["Cache-Control"] = f"public, max-age={YEAR}, immutable" if immutable else "no-cache"
        return resp


def init_app(app: Flask) -> None:
    assets = Assets(Path(app.static_folder))
    app.extensions["assets"] = assets
    app.view_functions["static"] = assets.serve
    app.add_template_global(assets.preloads, "module_preloads")

    @app.url_defaults
    def fingerprint(endpoint: str, values: dict) -> None:
        if endpoint == "static" and values.get("filename") in assets.url:
            values["filename"] = assets.url[values["filename"]]

    app.after_request(compress)


def compress(resp: Response) -> Response:
    """gzip a dynamic text response (HTML, JSON) when the client accepts it and it is worth it."""
    if (
        resp.direct_passthrough
        or resp.status_code < 200
        or resp.status_code in (204, 304)
        or "Content-Encoding" in resp.headers
        or resp.is_streamed
        or not (resp.mimetype or "").startswith(_COMPRESSIBLE)
        or "gzip" not in request.headers.get("Accept-Encoding", "")
    ):
        return resp
    body = resp.get_data()
    if len(body) < MIN_GZIP:
        return resp
    resp.set_data(gzip.compress(body, 6, mtime=0))
    resp.headers["Content-Encoding"] = "gzip"
    resp.vary.add("Accept-Encoding")
    return resp
