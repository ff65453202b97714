"""Who becomes a client of the rewarder port, and what their leaving sets off.

Holds :class:`Admission`, a part :class:`~.server.RewarderServer` holds (not inherits): a
:class:`~.server_link.ServerLink` tells it about its connection (the
:class:`~.server_link.Door` calls): Universe's viewer URL and web pages at the handshake;
passwords (with the shared failed-password throttle), the one active agent (or one per
player), observers and agents of other front ends when the WebSocket opens; and on the
way out, the seat freed at once and the handler told once nothing of the client's is
under way. It owns who is in (:attr:`Admission.clients`, :attr:`Admission.seated`); it
is given what it reads of the server (the handler, the port's settings, callables). The
messages themselves are :mod:`.server`'s, and a step never comes through here.
"""

from __future__ import annotations

import hmac
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final, Protocol

from websockets.http11 import Request, Response

from . import connections, protocol
from .auth import basic_auth_password
from .protocol import CLOSE_BAD_PLAYER, CLOSE_BUSY, CLOSE_REPLACED, CLOSE_THROTTLED, CLOSE_UNAUTHORIZED
from .server_link import ServerLink

log = logging.getLogger("rewarder.server")

#: Universe served a browser viewer at http://host:15900/viewer/; we redirect it.
VIEWER_PATH: Final = "/viewer"
#: The peer address a client of the local Unix socket counts as (the throttle's key):
#: it runs on this machine, as a loopback TCP client does.
LOCAL_PEER: Final = "127.0.0.1"


class AuthGuard(Protocol):
    """Failed-password throttling shared by a remote's ports (``rewarder.throttle``)."""

    def refusal(self, address: str | None) -> str | None: ...
    def failed(self, address: str | None, where: str) -> None: ...
    def succeeded(self, address: str | None) -> None: ...


class Admitting(Protocol):
    """What admission asks of the server's handler (a part of :class:`~.server.EnvHandler`)."""

    episode_id: int

    def describe(self) -> dict[str, Any]: ...
    def client_left(self, observer: bool) -> None: ...


@dataclass(frozen=True, slots=True)
class Entry:
    """Who may come in through one rewarder port: its settings, fixed at start-up."""

    #: The password agents must give (None: none).
    password: str | None = None
    #: The port's TLS context (None: plain ``ws://``); the viewer's URL follows it.
    tls: ssl.SSLContext | None = None
    #: Web pages (lower-case ``Origin`` values without a trailing ``/``) let in.
    allow_origins: frozenset[str] = frozenset()
    #: Throttles wrong passwords per address (shared with the remote's other ports).
    auth_guard: AuthGuard | None = None
    #: The largest message most methods take (each client's connection checks it).
    max_message_bytes: int = protocol.MAX_MESSAGE_BYTES


def _nobody() -> str | None:
    return None


def _one() -> int:
    return 1


def _no_seat(player: int) -> str | None:
    return None


class Admission:
    """Handshakes, admission and departures of one rewarder port's connections."""

    def __init__(
        self,
        handler: Admitting,
        entry: Entry,
        *,
        closing: Callable[[], bool],
        held_by: Callable[[], str | None] = _nobody,
        players: Callable[[], int] = _one,
        seat_held_by: Callable[[int], str | None] = _no_seat,
    ) -> None:
        """Nobody is in yet.

        Args:
            handler: the environment side (what it describes, and who hears of leavers).
            entry: the port's settings (password, TLS, web pages, throttle, message limit).
            closing: whether the port is shutting down (newcomers are then refused).
            held_by: names an agent of another front end holding the remote.
            players: how many players the environment has.
            seat_held_by: names who holds a player on another front end.
        """
        self.handler, self.entry, self.closing = handler, entry, closing
        self.held_by, self.players, self.seat_held_by = held_by, players, seat_held_by
        #: The admitted clients (agents and observers).
        self.clients: set[ServerLink] = set()
        #: The active clients by player: one on a single-player remote, player 0's.
        self.seated: dict[int, ServerLink] = {}
        #: The port of the remote's browser viewer, if it serves one: Universe's viewer URL
        #: (``http://host:15900/viewer/``) is then redirected there (:meth:`serve_viewer`).
        self.viewer_port: int | None = None

    def serve_viewer(self, port: int | None) -> None:
        """Redirect Universe's viewer URL to the remote's browser viewer on ``port``.

        Args:
            port: the viewer's port (None: no viewer; the URL gets a 404 saying so).
        """
        self.viewer_port = port

    @property
    def active(self) -> ServerLink | None:
        """Player 0's client: Universe's one active client."""
        return self.seated.get(0)

    def handshake(self, link: ServerLink, request: Request) -> Response | None:
        """Plain HTTP for Universe's viewer URL; web pages refused; the rest goes on to the
        WebSocket.

        Args:
            link: the connection.
            request: its HTTP request.

        Returns:
            The HTTP response to send instead of the WebSocket upgrade, or None to upgrade.
        """
        origin = request.headers.get("Origin")
        if origin is not None and origin.rstrip("/").lower() not in self.entry.allow_origins:
            log.info("refusing a handshake from a web page (Origin %s)", origin[:200])
            return link.ws.reject(
                HTTPStatus.FORBIDDEN,
                f"this rewarder does not accept connections from web pages (Origin: "
                f"{origin[:200]}): any site open in a browser here could drive the remote. "
                "Agents send no Origin header. To allow this page, serve with "
                f"--allow-origin {origin[:200]}\n",
            )
        if not request.path.startswith(VIEWER_PATH):
            return None
        if self.viewer_port is None:
            return link.ws.reject(
                HTTPStatus.NOT_FOUND,
                "this remote serves no browser viewer; start it with "
                "`universe-remote serve ENV_ID --http-port`\n",
            )
        # The address the request came in on, never its Host header (a client's words).
        local = link.local_address
        host = str(local[0]) if isinstance(local, tuple) else "127.0.0.1"  # (a Unix socket's: a name)
        host = f"[{host}]" if ":" in host else host
        response = link.ws.reject(
            HTTPStatus.FOUND, f"the viewer is on port {self.viewer_port}\n"
        )
        scheme = "https" if self.entry.tls is not None else "http"  # the viewer serves TLS with us
        response.headers["Location"] = f"{scheme}://{host}:{self.viewer_port}{request.path}"
        return response

    def opened(self, link: ServerLink) -> None:
        """Admit the client (seat an agent, send the describe) or say why not and close.

        Args:
            link: the connection whose WebSocket opened.
        """
        assert link.request is not None, "opened before the handshake's request"
        get = link.request.headers.get
        observer = get(protocol.OBSERVER_HEADER, "false").strip().lower() == "true"
        link.observer = observer
        link.proto = connections.ServerConnection(
            observer=observer, max_message_bytes=self.entry.max_message_bytes
        )
        client_id = get(protocol.CLIENT_ID_HEADER, "").strip()
        if len(client_id) > protocol.MAX_CLIENT_ID_CHARS:
            client_id = ""
        link.client_id = client_id
        address = link.remote_address
        peer = address[0] if isinstance(address, tuple) else None if address is None else LOCAL_PEER
        player = 0
        refusal = self._refusal(get("authorization"), observer, client_id, peer)
        if refusal is None and not observer:
            player, refusal = self._seat_for(get(protocol.PLAYER_HEADER), client_id)
        if refusal is None and self.closing():
            refusal = 1001, "the remote is shutting down"
        if refusal is not None:
            code, reason = refusal
            log.info("refusing %s: %s", address, reason)
            link.send(link.proto.close(reason))
            link.close(code, reason)
            return
        if not observer:
            old = self.seated.get(player)
            if old is not None:  # the same agent again (_refusal allowed it): it wins
                self._replace(old)
            self.seated[player] = link
            link.player = player
        link.admitted = True
        self.clients.add(link)
        log.info("%s connected from %s", "observer" if observer else "agent", address)
        link.send(link.proto.describe(self.handler.episode_id, self.handler.describe()))

    def ended(self, link: ServerLink) -> None:
        """The client left or was dropped: free its seat now; the handler hears of it once
        its request under way (if any) is done, as when messages were served by a task.

        Args:
            link: the connection that ended.
        """
        if not link.admitted:
            return
        was_active = link.player is not None and self.seated.get(link.player) is link
        self._forget(link)  # (not if a newer one replaced it)
        link.left_due = link.observer or was_active
        if not link.busy:
            self.tell_left(link)
        log.info("%s from %s left", "observer" if link.observer else "agent", link.remote_address)

    def tell_left(self, link: ServerLink) -> None:
        """Tell the handler the client left, if it is owed that and not told yet (the
        server calls this too, once a request of the client's under way is done).

        Args:
            link: the connection that left.
        """
        if link.left_due and not link.left_told:
            link.left_told = True
            self._left(link)

    def _replace(self, old: ServerLink) -> None:
        """Close the active client a newer connection with its client id replaces."""
        reason = "replaced by a newer connection with the same client id"
        log.info("%s: %s", old.remote_address, reason)
        self._forget(old)
        old.left_due = True
        self.tell_left(old)
        old.send(old.proto.close(reason))
        old.close(CLOSE_REPLACED, reason)

    def _forget(self, client: ServerLink) -> None:
        self.clients.discard(client)
        if client.player is not None and self.seated.get(client.player) is client:
            del self.seated[client.player]

    def _left(self, client: ServerLink) -> None:
        """Tell the handler a client left; a multi-player handler hears which player."""
        player_left = getattr(self.handler, "player_left", None)
        if client.player and player_left is not None:
            player_left(client.player)
        else:
            self.handler.client_left(client.observer)

    def _seat_for(self, header: str | None, client_id: str) -> tuple[int, tuple[int, str] | None]:
        """The player an agent asks for (``openai-player``; none: 0), or why it may not
        have it. On a single-player remote only player 0 exists and ``_refusal`` already
        checked its slot."""
        players = self.players()
        player = 0
        if header is not None:
            text = header.strip()
            if not (text.isdigit() and int(text) < players):
                return 0, (CLOSE_BAD_PLAYER, (
                    f"{protocol.PLAYER_HEADER}: {header[:20]!r} names no player of this remote: "
                    f"it has {players} player(s), 0..{players - 1}"
                ))
            player = int(text)
        if players == 1:
            return player, None
        holder = self.seat_held_by(player)
        seated = self.seated.get(player)
        if seated is not None and not (client_id and seated.client_id == client_id):
            holder = f"another agent on the rewarder{f' ({seated.client_id})' if seated.client_id else ''}"
        if holder is None:
            return player, None
        free = [
            p for p in range(players) if p not in self.seated and self.seat_held_by(p) is None
        ]
        hint = (
            f"ask for a free one with header '{protocol.PLAYER_HEADER}: {free[0]}' (free: "
            f"{', '.join(map(str, free))})" if free else "no player is free"
        )
        return player, (CLOSE_BUSY, (
            f"player {player} is held by {holder}; {hint}, or connect with header "
            "'openai-observer: true' to watch"
        ))

    def _refusal(
        self, authorization: str | None, observer: bool, client_id: str = "",
        peer: str | None = None,
    ) -> tuple[int, str] | None:
        """Why this handshake may not become a client, with the close code; None if it may."""
        guard, password = self.entry.auth_guard, self.entry.password
        if password is not None:
            if guard is not None and (throttled := guard.refusal(peer)) is not None:
                return CLOSE_THROTTLED, throttled
            given = basic_auth_password(authorization)
            if given is None:
                return CLOSE_UNAUTHORIZED, (
                    "this remote needs a password: send 'Authorization: Basic "
                    "base64(\"<password>:\")' (the password in the username field)"
                )
            if not hmac.compare_digest(given.encode(), password.encode()):
                if guard is not None:
                    guard.failed(peer, "the rewarder port")
                return CLOSE_UNAUTHORIZED, "wrong password for this remote"
            if guard is not None:
                guard.succeeded(peer)
        multi = self.players() > 1  # seats are checked one by one (_seat_for)
        holder = None if observer or multi else self.held_by()
        if holder is not None:
            return CLOSE_BUSY, (
                f"{holder} holds this remote; connect with header 'openai-observer: true' to "
                "watch, or use another remote"
            )
        active = self.active
        if (not observer and not multi and active is not None
                and not (client_id and active.client_id == client_id)):
            return CLOSE_BUSY, (
                "another agent is already connected to this remote as its active client; "
                "connect with header 'openai-observer: true' to watch, or use another remote"
            )
        return None
