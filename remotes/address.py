"""Universe's remote address grammar, parsed and checked.

Holds :class:`RemoteAddress`, :func:`parse_remotes`, :func:`format_remotes`,
:func:`resolve_addresses` (what every env's ``remotes`` argument may be) and
:func:`tls_context` (the one verifying context an address's TLS remotes share).

    vnc://host:5900+15900,host2:5901+15901?password=secret
    vnc://host:5900              VNC only (no rewards)
    vnc://host:+15900            rewarder only (no pixels)
    vnc+tls://host:5900+15900    both channels over TLS (VeNCrypt, wss://): a remote
                                 served with --tls-cert; its certificate is verified

The ``vnc://`` prefix is optional, spaces around commas are ignored, and a list of
strings may be given instead of one comma-separated string (each with its own scheme).
As in Universe, either every entry names a rewarder port or none does.
"""

from __future__ import annotations

import os
import re
import ssl
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from rewarder.tls import client_context

#: More remotes than this in one address is a typo (or a cluster, which wants a scheduler).
MAX_REMOTES: Final = 1024
#: The schemes: plain, and TLS on both channels.
SCHEME: Final = "vnc://"
TLS_SCHEME: Final = "vnc+tls://"

_ENTRY = re.compile(
    r"""^(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.\-]+)
         :(?P<vnc>\d*)
         (?:\+(?P<rewarder>\d+))?$""",
    re.VERBOSE,
)


class AddressError(ValueError):
    """An address that does not follow the grammar; the message shows the right form."""


@dataclass(frozen=True, slots=True)
class RemoteAddress:
    """One remote: its host, the ports of its two channels (None: not used), and whether
    it serves them over TLS (``vnc+tls://``)."""

    host: str
    vnc_port: int | None
    rewarder_port: int | None
    tls: bool = False

    @property
    def vnc(self) -> str | None:
        """``host::port`` for the VNC client, or None."""
        return None if self.vnc_port is None else f"{self.host}::{self.vnc_port}"

    @property
    def rewarder(self) -> str | None:
        """``host:port`` for the rewarder client, or None."""
        return None if self.rewarder_port is None else f"{self.host}:{self.rewarder_port}"

    @property
    def entry(self) -> str:
        """``host:5900+15900``: the address without its scheme."""
        vnc = "" if self.vnc_port is None else str(self.vnc_port)
        rewarder = "" if self.rewarder_port is None else f"+{self.rewarder_port}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{vnc}{rewarder}"

    def __str__(self) -> str:
        """:attr:`entry`, with ``vnc+tls://`` in front for a TLS remote."""
        return f"{TLS_SCHEME}{self.entry}" if self.tls else self.entry


def _port(text: str, entry: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:
        raise AddressError(f"port {port} in {entry!r} is not in 1..65535")
    return port


def parse_remotes(spec: str | Sequence[str]) -> tuple[list[RemoteAddress], str | None]:
    """The remotes an address names, and the password it carries (or None).

    Args:
        spec: an address string (``vnc://host:5900+15900,...?password=...``) or a list of
            them.

    Returns:
        The remotes, and the password (None when none is given).

    Raises:
        AddressError: the address cannot be read; the message shows the grammar.
    """
    if not isinstance(spec, str):
        parsed = [_parse(s) for s in spec]
        passwords = {password for _, password in parsed if password is not None}
        if len(passwords) > 1:
            raise AddressError(f"the addresses in {spec!r} carry different passwords; give one")
        remotes = [remote for group, _ in parsed for remote in group]
        _check(remotes, spec)
        return remotes, passwords.pop() if passwords else None
    remotes, password = _parse(spec)
    _check(remotes, spec)
    return remotes, password


def _check(remotes: Sequence[RemoteAddress], spec: str | Sequence[str]) -> None:
    """Rules over the whole address: how many, and rewarder ports everywhere or nowhere."""
    if not remotes:
        raise AddressError(f"{spec!r} names no remote; write vnc://host:5900+15900")
    if len(remotes) > MAX_REMOTES:
        raise AddressError(f"{len(remotes)} remotes is over the limit of {MAX_REMOTES}")
    with_rewarder = {r.rewarder_port is not None for r in remotes}
    if len(with_rewarder) > 1:
        raise AddressError(
            f"either every remote in {spec!r} names a rewarder port (+15900) or none does"
        )


def _parse(spec: str) -> tuple[list[RemoteAddress], str | None]:
    """One address string's remotes (one scheme for all) and password."""
    text = spec.strip()
    tls = text.startswith(TLS_SCHEME)
    if tls or text.startswith(SCHEME):
        text = text.split("://", 1)[1]
    elif "://" in text:
        scheme = text.split("://", 1)[0]
        raise AddressError(
            f"unknown scheme {scheme!r}:// in {spec!r}; use vnc://host:5900+15900, or "
            "vnc+tls://host:5900+15900 for a remote served with TLS"
        )
    text, _, query = text.partition("?")
    password = None
    if query:
        params = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=False)
        unknown = sorted(set(params) - {"password"})
        if unknown:
            raise AddressError(
                f"unknown address parameter(s) {', '.join(unknown)}; only ?password=... is known"
            )
        password = params["password"][-1]
    entries = [e.strip() for e in text.split(",")]
    if not text or not all(entries):
        raise AddressError(
            f"empty remote in {spec!r}; write vnc://host:5900+15900[,host:5901+15901...]"
        )
    if len(entries) > MAX_REMOTES:
        raise AddressError(f"{len(entries)} remotes is over the limit of {MAX_REMOTES}")
    remotes: list[RemoteAddress] = []
    for entry in entries:
        match = _ENTRY.match(entry)
        if match is None:
            raise AddressError(
                f"cannot read remote {entry!r}: write host:VNCPORT+REWARDERPORT "
                "(e.g. 127.0.0.1:5900+15900), host:VNCPORT or host:+REWARDERPORT"
            )
        vnc = _port(match["vnc"], entry) if match["vnc"] else None
        rewarder = _port(match["rewarder"], entry) if match["rewarder"] else None
        if vnc is None and rewarder is None:
            raise AddressError(f"remote {entry!r} names no port")
        remotes.append(RemoteAddress(match["host"].strip("[]"), vnc, rewarder, tls))
    return remotes, password


def format_remotes(remotes: Sequence[RemoteAddress], password: str | None = None) -> str:
    """The address string for ``remotes`` (what :func:`parse_remotes` reads back); one
    string has one scheme, so the remotes are all TLS or all plain."""
    if len({r.tls for r in remotes}) > 1:
        raise AddressError(
            "one address string cannot mix TLS and plain remotes: pass a list of two strings "
            "(vnc+tls://... and vnc://...)"
        )
    query = "?" + urllib.parse.urlencode({"password": password}) if password else ""
    scheme = TLS_SCHEME if remotes and remotes[0].tls else SCHEME
    return scheme + ",".join(r.entry for r in remotes) + query


def resolve_addresses(
    spec: str | RemoteAddress | Sequence[str] | Sequence[RemoteAddress],
) -> tuple[list[RemoteAddress], str | None]:
    """Remotes and password from an address string, a list of them, or RemoteAddresses.

    Args:
        spec: an address string, a list of them, a RemoteAddress or a list of them.

    Returns:
        The remotes, and the password the strings carry (None for RemoteAddresses).

    Raises:
        AddressError: a string cannot be read.
    """
    if isinstance(spec, RemoteAddress):
        return [spec], None
    if spec and not isinstance(spec, str) and all(isinstance(a, RemoteAddress) for a in spec):
        return list(spec), None  # type: ignore[arg-type]
    return parse_remotes(spec)  # type: ignore[arg-type]


def tls_context(
    remotes: Sequence[RemoteAddress], tls_ca: str | os.PathLike[str] | None
) -> ssl.SSLContext | None:
    """The one verifying context the ``vnc+tls://`` remotes among ``remotes`` share
    (``tls_ca``, else $UNIVERSE_REMOTE_TLS_CA, else the system's trust store), or None.

    Args:
        remotes: the env's remotes.
        tls_ca: a CA bundle to verify them with (None: the default).

    Returns:
        The context, or None when no remote serves TLS.

    Raises:
        ValueError: ``tls_ca`` was given but no remote serves TLS.
    """
    if any(r.tls for r in remotes):
        return client_context(tls_ca)
    if tls_ca is not None:
        raise ValueError(
            f"tls_ca={str(tls_ca)!r} was given, but no remote in the address serves TLS: "
            "write vnc+tls://host:5900+15900 for a remote served with --tls-cert"
        )
    return None
