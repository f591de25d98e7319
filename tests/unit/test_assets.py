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


def test_a_page_preloads_every_module_its_scripts_import_transitively_and_nothing_else(tmp_path):
    (tmp_path / "js" / "sub").mkdir(parents=True)
    (tmp_path / "js" / "sub" / "leaf.js").write_text("export const y = 1;\n")
    (tmp_path / "js" / "sub" / "dep.js").write_text("import { y } from './leaf.js';\nexport const x = y;\n")
    (tmp_path / "js" / "main.js").write_text("import { x } from './sub/dep.js';\n")
    (tmp_path / "js" / "other.js").write_text("import { y } from './sub/leaf.js';\n")
    (tmp_path / "js" / "unused.js").write_text("export const z = 3;\n")
    assets = Assets(tmp_path)
    assert assets.preloads("js/main.js") == ["js/sub/dep.js", "js/sub/leaf.js"]
    # two entry points share a dependency: listed once; an entry point is never preloaded as its own import
    assert assets.preloads("js/main.js", "js/other.js") == ["js/sub/dep.js", "js/sub/leaf.js"]
    assert assets.preloads("js/unused.js") == []


def test_a_module_loaded_on_first_use_is_fingerprinted_but_not_preloaded(tmp_path):
    (tmp_path / "js").mkdir()
    (tmp_path / "js" / "now.js").write_text("export const a = 1;\n")
    (tmp_path / "js" / "later.js").write_text("import { a } from './now.js';\nexport const b = a;\n")
    (tmp_path / "js" / "main.js").write_text("import { a } from './now.js';\nconst m = () => import('./later.js');\n")
    assets = Assets(tmp_path)
    assert assets.preloads("js/main.js") == ["js/now.js"]  # import() waits for its first use
    assert f"import('./{assets.url['js/later.js'].rpartition('/')[2]}')" in assets.by_plain["js/main.js"].body.decode()
    before = assets.url["js/main.js"]
    (tmp_path / "js" / "later.js").write_text("export const b = 2;\n")
    assert Assets(tmp_path).url["js/main.js"] != before  # the name it loads changed, so its own URL does


def test_a_chapter_page_preloads_the_widgets_whole_module_graph_with_fingerprinted_urls():
    from app import create_app
    from core.config import Config

    app = create_app(Config(testing=True))
    html = app.test_client().get("/chapters/1").get_data(as_text=True)
    assets = app.extensions["assets"]
    preloaded = re.findall(r'<link rel="modulepreload" href="/static/([^"]+)">', html)
    want = [assets.url[p] for p in assets.preloads("js/widget/index.js", "js/classroom.js")]
    assert preloaded == want and "js/widget/timeline-model" in " ".join(preloaded)  # three imports deep
    # the widget's first request starts with the page, and a reload revalidates it without a body
    # (only its preset's part, at the URL the widget asks: data-meta)
    assert '<link rel="preload" href="/api/meta?preset=ch1" as="fetch" crossorigin="anonymous">' in html
    assert 'data-meta="/api/meta?preset=ch1"' in html
    first = app.test_client().get("/api/meta?preset=ch1")
    again = app.test_client().get("/api/meta?preset=ch1", headers={"If-None-Match": first.headers["ETag"]})
    assert first.status_code == 200 and again.status_code == 304 and not again.get_data()


def test_a_presets_meta_keeps_its_own_steps_and_buttons_and_all_the_rest():
    from app import create_app
    from core.config import Config

    client = create_app(Config(testing=True)).test_client()
    full = client.get("/api/meta").get_json()
    one = client.get("/api/meta?preset=ch4").get_json()
    assert len(full["steps"]) > 1 and len(full["scenario_buttons"]) > 1
    assert one["steps"] == {"ch4": full["steps"]["ch4"]} and one["steps"]["ch4"]
    assert one["scenario_buttons"] == {"ch4": full["scenario_buttons"]["ch4"]}
    assert {k: v for k, v in one.items() if k not in ("steps", "scenario_buttons")} == {
        k: v for k, v in full.items() if k not in ("steps", "scenario_buttons")
    }
    bad = client.get("/api/meta?preset=ch99")
    assert bad.status_code == 422 and bad.get_json()["error"] == "invalid_preset"
