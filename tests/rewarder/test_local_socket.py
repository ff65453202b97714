"""Which rewarder ports get a local Unix twin, and which clients dial it: ports that hold
127.0.0.1 without TLS, and clients dialling 127.0.0.1 without TLS."""

from __future__ import annotations

from rewarder import local_socket


def test_loopback_and_wildcard_ports_get_a_twin_tls_and_other_addresses_do_not() -> None:
    for host in ("127.0.0.1", "localhost", "0.0.0.0", "", None):
        assert local_socket.serves(host, tls=False) is local_socket.SUPPORTED, host
    # Ports that do not hold 127.0.0.1 (another remote may hold 127.0.0.1 on that number).
    for host in ("127.0.0.2", "::1", "10.1.2.3", "192.168.0.7", "example.org"):
        assert not local_socket.serves(host, tls=False), host
    assert not local_socket.serves("127.0.0.1", tls=True)


def test_only_clients_of_a_local_host_without_tls_dial_the_twin() -> None:
    assert local_socket.dials("127.0.0.1", secure=False) is local_socket.SUPPORTED
    assert not local_socket.dials("localhost", secure=False)  # it may resolve to ::1 first
    assert not local_socket.dials("127.0.0.1", secure=True)
    assert not local_socket.dials("10.1.2.3", secure=False)
    assert not local_socket.dials("::1", secure=False)
    assert local_socket.name(15900) != local_socket.name(15901)
