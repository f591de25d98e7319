"""The server's ACL and address settings (issue 30): what the users file grants, what logs show, and the
launcher's refusal to open the server to a network without passwords. The live check (a client refused
without its password, each role held to its commands) is tests/integration/test_network.py."""

from __future__ import annotations

import hashlib

from core.procs import server_tag
from runtime import embedded_redis, launcher


def test_the_users_file_turns_the_default_user_off_and_stores_no_password():
    text = embedded_redis.acl_file({"web": "w-secret", "pool": "p-secret"})
    lines = {line.split()[1]: line for line in text.splitlines()}
    assert lines["default"].startswith("user default off")
    assert "w-secret" not in text and "p-secret" not in text
    assert f"#{hashlib.sha256(b'w-secret').hexdigest()}" in lines["web"]
    assert " off " in lines["admin"], "a role without a password must not be able to log in"
    assert "-@" not in lines["admin"] and "+@all" in lines["admin"]
    for role in ("web", "pool"):  # an allowlist: nothing but the commands the role sends (issue 39)
        granted = set(lines[role].split(" -@all ", 1)[1].split())
        assert all(g.startswith("+") and "@" not in g for g in granted), lines[role]
        assert {"+get", "+hset", "+evalsha", "+xadd"} <= granted, role
        for never in (
            "+flushall",
            "+flushdb",
            "+config|set",
            "+dump",
            "+restore",
            "+keys",
            "+script|flush",
            "+function|flush",
            "+monitor",
            "+acl|setuser",
            "+debug",
            "+shutdown",
            "+client|kill",
        ):
            assert never not in granted, f"{role} is granted {never}"


def test_a_url_shown_in_a_log_hides_its_password():
    url = embedded_redis.server_url("10.0.0.2", 6390, "pool", "p@ss:w/rd")
    assert url == "redis://pool:p%40ss%3Aw%2Frd@10.0.0.2:6390/0"
    assert embedded_redis.shown(url) == "redis://pool:***@10.0.0.2:6390/0"
    assert embedded_redis.shown("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_the_tag_on_a_lab_processs_command_line_names_the_server_and_database_but_no_user_or_password():
    tag = server_tag(embedded_redis.server_url("10.0.0.2", 6390, "pool", "p@ss:w/rd"))
    assert tag == "@10.0.0.2:6390/0" and "ss" not in tag and "pool" not in tag
    tags = {
        server_tag(u)
        for u in (
            "redis://127.0.0.1:6390/1",
            "redis://127.0.0.1:6390/11",
            "redis://127.0.0.1:16390/1",
            "redis://127.0.0.2:6390/1",
        )
    }
    assert len(tags) == 4, tags  # another database, port or address is another stack


def test_the_launcher_will_not_open_the_server_to_a_network_without_passwords(monkeypatch, capsys):
    monkeypatch.setenv("SERVER_BIND", "10.0.0.2")
    for name in ("REDIS_WEB_PASSWORD", "REDIS_POOL_PASSWORD", "REDIS_ADMIN_PASSWORD", "REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    assert launcher.main(["server"]) == 2
    assert "no password" in capsys.readouterr().err
