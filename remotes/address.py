"""Universe's remote address grammar, parsed and checked.

Holds :class:`RemoteAddress`, :func:`parse_remotes` and :func:`format_remotes`.

    vnc://host:5900+15900,host2:5901+15901?password=secret
    vnc://host:5900              VNC only (no rewards)
    vnc://host:+15900            rewarder only (no pixels)

The ``vnc://`` prefix is optional, spaces around commas are ignored, and a list of
strings may be given instead of one comma-separated string. As in Universe, either every
entry names a rewarder port or none does.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

#: More remotes than this in one address is a typo (or a cluster, which wants a scheduler).
MAX_REMOTES: Final = 1024

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
    """One remote: its host and the ports of its two channels (None: not used)."""

    host: str
    vnc_port: int | None
    rewarder_port: int | None

    @property
    def vnc(self) -> str | None:
        """``host::port`` for the VNC client, or None."""
        return None if self.vnc_port is None else f"{self.host}::{self.vnc_port}"

    @property
    def rewarder(self) -> str | None:
        """``host:port`` for the rewarder client, or None."""
        return None if self.rewarder_port is None else f"{self.host}:{self.rewarder_port}"

    def __str__(self) -> str:
        vnc = "" if self.vnc_port is None else str(self.vnc_port)
        rewarder = "" if self.rewarder_port is None else f"+{self.rewarder_port}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{vnc}{rewarder}"


def _port(text: str, entry: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:
        raise AddressError(f"port {port} in {entry!r} is not in 1..65535")
    return port


def parse_remotes(spec: str | Sequence[str]) -> tuple[list[RemoteAddress], str | None]:
    """The remotes an address names, and the password it carries (or None)."""
    if isinstance(spec, str):
        text = spec.strip()
    else:
        text = ",".join(s.strip().removeprefix("vnc://") for s in spec)
    if text.startswith("vnc://"):
        text = text[len("vnc://") :]
    elif "://" in text:
        scheme = text.split("://", 1)[0]
        raise AddressError(
            f"unknown scheme {scheme!r}:// in {spec!r}; use vnc://host:5900+15900"
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
    remotes = []
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
        remotes.append(RemoteAddress(match["host"].strip("[]"), vnc, rewarder))
    with_rewarder = {r.rewarder_port is not None for r in remotes}
    if len(with_rewarder) > 1:
        raise AddressError(
            f"either every remote in {spec!r} names a rewarder port (+15900) or none does"
        )
    return remotes, password


def format_remotes(remotes: Sequence[RemoteAddress], password: str | None = None) -> str:
    """The address string for ``remotes`` (what :func:`parse_remotes` reads back)."""
    query = "?" + urllib.parse.urlencode({"password": password}) if password else ""
    return "vnc://" + ",".join(str(r) for r in remotes) + query
