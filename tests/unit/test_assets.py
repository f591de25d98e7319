"""Fingerprinted static files: every rewritten ES-module import names a file the app serves."""

import re
from pathlib import Path

from app.assets import Assets

STATIC = Path(__file__).resolve().parents[2] / "static"
IMPORT = re.compile(r"""(?:\bimport|\bfrom|\bimport\s*\()\s*['"](\.{1,2}/[^'"]+)['"]""")


def test_every_rewritten_import_resolves_to_a_served_fingerprinted_file():
    assets = Assets(STATIC)
    checked = 0
    for path, asset in assets.by_plain.items():
        if not path.endswith(".js") or path.startswith("vendor/"):
            continue
        printed_dir = assets.url[path].rpartition("/")[0]
        for spec in IMPORT.findall(asset.body.decode()):
            parts = (printed_dir.split("/") if printed_dir else []) + spec.split("/")
            stack: list[str] = []
            for p in parts:
                if p == "..":
                    stack.pop()
                elif p not in (".", ""):
                    stack.append(p)
            target = "/".join(stack)
            assert target in assets.by_print, f"{path} imports {spec}, which is not served ({target})"
            checked += 1
    assert checked > 20  # the widget's modules and the chapter add-ons all import something


def test_a_changed_dependency_changes_its_importers_url(tmp_path):
    (tmp_path / "js" / "sub").mkdir(parents=True)
    (tmp_path / "js" / "sub" / "dep.js").write_text("export const x = 1;\n")
    (tmp_path / "js" / "main.js").write_text("import { x } from './sub/dep.js';\n")
    before = Assets(tmp_path).url["js/main.js"]
    (tmp_path / "js" / "sub" / "dep.js").write_text("export const x = 2;\n")
    after = Assets(tmp_path)
    assert after.url["js/main.js"] != before
    assert "./sub/dep." in after.by_plain["js/main.js"].body.decode()
