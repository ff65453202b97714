"""Universe's address grammar."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from remotes.address import AddressError, RemoteAddress, format_remotes, parse_remotes


def test_both_channels_and_password() -> None:
    remotes, password = parse_remotes("vnc://10.0.0.1:5900+15900,host-2:5901+15901?password=s3cret")
    assert remotes == [RemoteAddress("10.0.0.1", 5900, 15900), RemoteAddress("host-2", 5901, 15901)]
    assert password == "s3cret"
    assert remotes[0].vnc == "10.0.0.1::5900" and remotes[0].rewarder == "10.0.0.1:15900"


def test_vnc_only_rewarder_only_lists_and_no_scheme() -> None:
    assert parse_remotes("vnc://h:5900")[0] == [RemoteAddress("h", 5900, None)]
    assert parse_remotes("h:+15900")[0] == [RemoteAddress("h", None, 15900)]
    assert parse_remotes(["vnc://a:1+2", " b:3+4 "])[0] == [
        RemoteAddress("a", 1, 2), RemoteAddress("b", 3, 4),
    ]
    assert parse_remotes("[::1]:5900+15900")[0] == [RemoteAddress("::1", 5900, 15900)]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("", "empty remote"),
        ("vnc://a:1+2,", "empty remote"),
        ("http://a:1+2", "unknown scheme 'http'"),
        ("vnc://a", "cannot read remote 'a'"),
        ("vnc://a:+", "cannot read remote"),
        ("vnc://a:", "names no port"),
        ("vnc://a:70000+1", "not in 1..65535"),
        ("vnc://a:1+2,b:3", "either every remote"),
        ("vnc://a:1+2?pasword=x", "unknown address parameter"),
    ],
)
def test_bad_addresses_say_how_to_write_them(spec: str, words: str) -> None:
    with pytest.raises(AddressError, match=words):
        parse_remotes(spec)


hosts = st.from_regex(r"[a-z][a-z0-9.\-]{0,20}", fullmatch=True)
ports = st.integers(1, 65535)


@given(
    st.lists(st.tuples(hosts, ports, ports), min_size=1, max_size=5),
    st.none() | st.text(min_size=1, max_size=10),
)
def test_round_trip(entries: list[tuple[str, int, int]], password: str | None) -> None:
    remotes = [RemoteAddress(h, v, r) for h, v, r in entries]
    assert parse_remotes(format_remotes(remotes, password)) == (remotes, password)
