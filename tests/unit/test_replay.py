"""The replay harness's own arithmetic (runtime/harness/replay.py): how it reads MONITOR, where a reply ends, and
how a copy's command is rewritten without changing its length."""

from __future__ import annotations

import pytest

from runtime.harness.replay import encode, parse_line, rename, reply_end, rewrite

NESTED = b"*2\r\n$5\r\nhello\r\n*3\r\n:1\r\n$-1\r\n*2\r\n+OK\r\n$3\r\na\r\n\r\n"  # a bulk string holding CRLF too


def test_a_monitor_line_gives_its_time_client_and_arguments_byte_for_byte() -> None:
    line = rb'+1796659371.828600 [0 10.0.0.3:50940] "HSET" "k" "a\"b\\c" "\x00\xe9" "x\r\ny" ""' + b"\r\n"
    argv = [b"HSET", b"k", b'a"b\\c', b"\x00\xe9", b"x\r\ny", b""]
    assert parse_line(line) == (1796659371.8286, "10.0.0.3:50940", argv)
    assert parse_line(b'+1796659371.828700 [0 lua] "ZSCORE" "k" "m"\r\n')[1] == "lua"
    assert parse_line(b"+OK\r\n") is None


def test_a_reply_ends_only_where_all_of_it_has_come() -> None:
    assert reply_end(NESTED, 0) == len(NESTED)
    for cut in range(len(NESTED)):
        assert reply_end(NESTED[:cut], 0) == -1, f"a reply cut at byte {cut} was taken as whole"
    two = b":7\r\n" + NESTED
    assert reply_end(two, 0) == 4
    assert reply_end(two, 4) == len(two)
    assert reply_end(b"*-1\r\n-ERR no\r\n", 0) == 5


def test_a_copy_renames_its_labs_and_moves_its_times_keeping_every_length() -> None:
    lab, room = "b82d98adef", "65Z4HRPB3H"
    names = rename([lab, room], 7)
    assert names == {lab.encode(): b"z00798adef", room.encode(): b"Z007HRPB3H"}
    cmd = encode(
        [
            b"XREAD",
            b"STREAMS",
            f"lab:{lab}:events".encode(),
            b"1796659376429-0",
            b'{"t_real":1796659371.8286,"room":"65Z4HRPB3H","pid":26591,"n":1234567890123456}',
            b"1796659374.248472",
            b"999",
        ]
    )
    out = rewrite(cmd, names, 100.5, (1796600000.0, 1796700000.0))
    assert len(out) == len(cmd), "a rewritten command changed length: its RESP lengths would lie"
    assert lab.encode() not in out and names[lab.encode()] in out
    assert b"1796659476929-0" in out, "a stream id (ms) was not moved"
    assert b"1796659472.3286" in out and b"1796659474.748472" in out, "a time in seconds was not moved"
    assert b'"pid":26591' in out and b"1234567890123456" in out and out.endswith(b"$3\r\n999\r\n")


@pytest.mark.parametrize("copy", [0, 1, 999])
def test_every_copys_names_are_its_own_and_as_long_as_the_recorded(copy: int) -> None:
    names = rename(["b82d98adef", "65Z4HRPB3H"], copy)
    assert all(len(old) == len(new) and old != new for old, new in names.items())
    assert len({n for c in (copy, copy + 1) for n in rename(["b82d98adef"], c).values()}) == 2
