"""The agent's side of the warm pool: ``pool://HOST:PORT`` addresses, the HTTP client,
and :class:`PooledRemotes`, the leases an env holds.

``RemoteEnv("pool://127.0.0.1:8900", env_id="builtin.Catch-v0")``,
``RemoteVectorEnv("pool://...", num_envs=8, env_id=...)`` and
``gymnasium.make_vec(id, num_envs=8, remotes="pool://...")`` claim their remotes here
(:func:`claim_remotes`), renew the leases in the background on the process's loop thread
(:mod:`remotes.loop`; every ``deadline / RENEW_SPLIT`` seconds, all of an env's leases
in one request) and release them on ``close()`` (and at exit).

A lease lost — the pool took its remote back (not renewed in time, past its maximum age)
or its remote died — shows as any lost remote does (:mod:`remotes.faults`): the step that
sees the connection close returns ``truncated`` with ``info["remote.error"]`` saying the
lease ended and why; before probing, the session asks :meth:`PooledRemotes.address_of`
where its remote is, which renews the lease and, if it ended, claims another remote and
points the session at it (with the new lease's client id). A lease that ended with no
remote to replace it yet is :class:`~remotes.group.Unplaced`: the session probes nothing
(it must not dial a remote the pool gave to someone else) and asks again.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import ssl
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import orjson

from rewarder.tls import client_context

from ..address import RemoteAddress, parse_remotes
from ..group import RemoteGroup, Unplaced
from ..loop import shared_loop

if TYPE_CHECKING:
    from ..session import RemoteSession

log = logging.getLogger(__name__)

#: The pool's address schemes: plain HTTP, and HTTPS (a pool served with --tls-cert).
POOL_SCHEME: Final = "pool://"
POOL_TLS_SCHEME: Final = "pool+tls://"
#: Renewals per deadline: a lease survives RENEW_SPLIT - 1 lost renewals in a row.
RENEW_SPLIT: Final = 4
#: Seconds one HTTP request to the pool may take (a claim adds its own wait).
REQUEST_TIMEOUT: Final = 10.0
#: Seconds a claim waits for a warm remote (the pool's own default).
CLAIM_WAIT: Final = 30.0
#: Seconds a replacement claim waits: short, because the session asks again at its next
#: probe (every RECONNECT_POLL) and a step must not wait on it.
REPLACE_WAIT: Final = 2.0


class PoolError(RuntimeError):
    """The pool refused a request or could not be reached; the message says why."""


def is_pool(spec: object) -> bool:
    """Whether an env's ``remotes=``/address names a pool rather than remotes.

    Args:
        spec: what the env was given.

    Returns:
        True for a ``pool://`` or ``pool+tls://`` string.
    """
    return isinstance(spec, str) and spec.strip().startswith((POOL_SCHEME, POOL_TLS_SCHEME))


@dataclass(frozen=True, slots=True)
class PoolAddress:
    host: str
    port: int
    tls: bool = False
    password: str | None = None

    def __str__(self) -> str:
        return f"{POOL_TLS_SCHEME if self.tls else POOL_SCHEME}{self.host}:{self.port}"


def parse_pool(spec: str) -> PoolAddress:
    """``pool://HOST:PORT[?password=PW]`` (``pool+tls://`` for a pool served with TLS).

    Args:
        spec: the pool's address.

    Returns:
        Its host, port, TLS flag and password.

    Raises:
        ValueError: ``spec`` is not a pool address (the message shows the form).
    """
    text = spec.strip()
    tls = text.startswith(POOL_TLS_SCHEME)
    if not tls and not text.startswith(POOL_SCHEME):
        raise ValueError(f"{spec!r} is not a pool address: write pool://HOST:PORT")
    parts = urllib.parse.urlsplit("http://" + text.split("://", 1)[1])
    query = urllib.parse.parse_qs(parts.query)
    unknown = sorted(set(query) - {"password"})
    if unknown or parts.path not in ("", "/") or parts.hostname is None or parts.port is None:
        raise ValueError(f"cannot read pool address {spec!r}: write pool://HOST:PORT[?password=PW]")
    password = query["password"][-1] if "password" in query else None
    return PoolAddress(parts.hostname, parts.port, tls, password)


class PoolClient:
    """Blocking calls to a pool's HTTP API (any thread: one connection per call)."""

    def __init__(self, address: PoolAddress, password: str | None = None,
                 tls_ca: str | None = None) -> None:
        """Nothing is sent until a call.

        Args:
            address: the pool (:func:`parse_pool`).
            password: the pool's password (None: the address's).
            tls_ca: a CA bundle to verify a ``pool+tls://`` pool with (None: the default).
        """
        self.address = address
        self.password = password if password is not None else address.password
        self._tls: ssl.SSLContext | None = client_context(tls_ca) if address.tls else None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
        """One request; its JSON reply, or :class:`PoolError` with the pool's message.

        Args:
            method: ``"GET"`` or ``"POST"``.
            path: the API path (``/v1/claim``...).
            body: the JSON body, if any.
            timeout: seconds for the whole request.

        Returns:
            The reply's JSON object.

        Raises:
            PoolError: the pool did not answer, or refused.
        """
        a = self.address
        conn = (http.client.HTTPSConnection(a.host, a.port, timeout=timeout, context=self._tls)
                if a.tls else http.client.HTTPConnection(a.host, a.port, timeout=timeout))
        headers = {"Content-Type": "application/json"}
        if self.password:
            headers["Authorization"] = f"Bearer {self.password}"
        try:
            conn.request(method, path, orjson.dumps(body) if body is not None else None, headers)
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise PoolError(f"the pool at {a} did not answer {path}: {exc}") from exc
        finally:
            conn.close()
        try:
            reply = orjson.loads(data)
        except orjson.JSONDecodeError:
            reply = {"error": data[:200].decode(errors="replace")}
        if response.status != 200:
            why = reply.get("error", reply)
            raise PoolError(f"the pool at {a} refused {path} ({response.status}): {why}")
        return reply  # type: ignore[no-any-return]

    def claim(self, env_id: str, mode: str | None = None, options: dict[str, Any] | None = None,
              seed: int | None = None, wait: float = CLAIM_WAIT,
              deadline: float | None = None) -> dict[str, Any]:
        """Lease a remote (waiting up to ``wait`` s for a warm one); ``deadline``: a shorter
        renewal deadline than the pool's, so an abandoned lease frees its remote sooner.

        Args:
            env_id: what the remote must serve.
            mode: ``"realtime"`` or ``"lockstep"`` (None: the pool's).
            options: the runtime's ``serve --option`` values.
            seed: the first episode's seed.
            wait: seconds to wait for a warm remote.
            deadline: seconds between renewals before the lease ends (None: the pool's).

        Returns:
            The lease: its id, client id, address, password and deadline.

        Raises:
            PoolError: no remote within ``wait``, or the pool refused.
        """
        body: dict[str, Any] = {"env_id": env_id, "wait": wait}
        extra = (("mode", mode), ("options", options), ("seed", seed), ("deadline", deadline))
        body.update({k: v for k, v in extra if v is not None})
        return self.call("POST", "/v1/claim", body, REQUEST_TIMEOUT + wait)

    def renew(self, leases: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Renew leases (an env's renewer does, every few seconds).

        Args:
            leases: the lease ids.

        Returns:
            ``{lease: {"alive": True, "expires_in": s}}``, or ``{"alive": False, "reason": why}``
            for a lease that ended.

        Raises:
            PoolError: the pool did not answer, or refused.
        """
        return self.call("POST", "/v1/renew", {"leases": list(leases)})["leases"]  # type: ignore[no-any-return]

    def release(self, leases: Sequence[str]) -> dict[str, Any]:
        """Give leases back to the pool, which takes their remotes back.

        Args:
            leases: the lease ids.

        Returns:
            The pool's answer (``released``, ``ended``).

        Raises:
            PoolError: the pool did not answer, or refused.
        """
        return self.call("POST", "/v1/release", {"leases": list(leases)})

    def status(self) -> dict[str, Any]:
        """The pool's state: its remotes by kind and state, claim latencies, every lease's age.

        Returns:
            The pool's status object.

        Raises:
            PoolError: the pool did not answer, or refused.
        """
        return self.call("GET", "/v1/status")


@dataclass(slots=True)
class _Held:
    """One lease as its holder sees it; ``lost`` says why it ended (None: live)."""

    id: str
    client_id: str
    address: RemoteAddress
    deadline: float
    lost: str | None = None


def _held(reply: dict[str, Any]) -> _Held:
    (address,), _ = parse_remotes(reply["address"])
    return _Held(reply["lease"], reply["client_id"], address, float(reply["deadline"]))


class PooledRemotes(RemoteGroup):
    """Remotes leased from a pool: an env made from them follows each lease to its
    replacement, and :meth:`close` releases them."""

    def __init__(
        self, client: PoolClient, request: dict[str, Any], replies: Sequence[dict[str, Any]]
    ) -> None:
        """Built by :func:`claim_remotes`, not by hand; starts renewing the leases.

        Args:
            client: the pool's client.
            request: the claim's arguments, to claim a replacement with.
            replies: each lease, as :meth:`PoolClient.claim` returned it.
        """
        self.client = client
        self.request = request
        self.held = [_held(r) for r in replies]
        self._lock = threading.Lock()
        self._sessions: list[RemoteSession | None] = [None] * len(self.held)
        super().__init__([h.address for h in self.held], replies[0]["password"])
        self._renewer = shared_loop().submit(self._renew_loop())

    @property
    def leases(self) -> list[str]:
        with self._lock:
            return [h.id for h in self.held]

    def follow(self, sessions: Sequence[RemoteSession]) -> None:
        """Have session *i* dial remote *i* with its lease's client id, explain a loss by
        its lease, and ask :meth:`address_of` where it is before it reconnects.

        Args:
            sessions: the env's sessions, one per lease, in order.
        """
        super().follow(sessions)
        for i, session in enumerate(sessions):
            self._sessions[i] = session
            session.client_id = self.held[i].client_id
            session.on_lost = lambda reason, i=i: self._explain(i, reason)  # type: ignore[misc]

    def _explain(self, i: int, reason: str) -> str:
        held = self.held[i]
        if held.lost is not None:
            return f"{reason}; its pool lease ended ({held.lost}); claiming another remote from the pool"
        if "replaced by a newer connection" in reason:
            return f"the pool took this remote back: its lease {held.id} ended ({reason}); claiming another"
        return f"{reason} (a pooled remote: its lease is checked, and another remote claimed if it ended)"

    def address_of(self, index: int) -> RemoteAddress:
        """Remote ``index``'s address, asked before each probe of a dropped remote
        (blocking: a worker thread). Renews its lease; if the lease ended, claims another
        remote and returns its address; :class:`Unplaced` if none could be claimed.

        Args:
            index: the remote.

        Returns:
            Its address now.

        Raises:
            Unplaced: its lease ended and no other remote could be claimed.
        """
        with self._lock:
            held = self.held[index]
        if held.lost is None:
            try:
                answer = self.client.renew([held.id]).get(held.id, {})
            except PoolError as exc:  # the pool is away: the remote may still be ours
                log.debug("renewing %s: %s", held.id, exc)
                return held.address
            if answer.get("alive"):
                return held.address
            held.lost = str(answer.get("reason", "ended"))
        try:
            reply = self.client.claim(**self.request, wait=REPLACE_WAIT)
        except PoolError as exc:
            raise Unplaced(
                f"its lease ended ({held.lost}) and no other remote could be claimed: {exc}"
            ) from exc
        new = _held(reply)
        with self._lock:
            self.held[index] = new
            self.addresses[index] = new.address
            session = self._sessions[index]
        if session is not None:
            session.client_id = new.client_id
        log.info("lease %s ended (%s): remote %d is now %s (lease %s)",
                 held.id, held.lost, index, new.address, new.id)
        return new.address

    async def _renew_loop(self) -> None:
        """On the loop thread: renew every live lease every ``deadline / RENEW_SPLIT``."""
        while True:
            with self._lock:
                live = [h for h in self.held if h.lost is None]
                interval = min((h.deadline for h in self.held), default=1.0) / RENEW_SPLIT
            if live:
                try:
                    answers = await asyncio.to_thread(self.client.renew, [h.id for h in live])
                except PoolError as exc:
                    log.warning("renewing %d pool lease(s): %s", len(live), exc)
                    answers = {}
                for h in live:
                    answer = answers.get(h.id)
                    if answer is not None and not answer.get("alive"):
                        h.lost = str(answer.get("reason", "ended"))
                        log.warning("pool lease %s of %s ended: %s", h.id, h.address, h.lost)
            await asyncio.sleep(interval)

    def _stop(self) -> None:
        """Stop renewing and release every lease still held."""
        self._renewer.cancel()
        live = [h.id for h in self.held if h.lost is None]
        if live:
            try:
                self.client.release(live)
            except PoolError as exc:  # the pool ends them at their deadline anyway
                log.warning("releasing %d pool lease(s): %s", len(live), exc)


def claim_remotes(
    spec: str, n: int, env_id: str | None, mode: str = "realtime", options: dict[str, Any] | None = None,
    password: str | None = None, tls_ca: str | None = None,
) -> PooledRemotes:
    """Claim ``n`` remotes of ``env_id`` from the pool at ``spec`` (``pool://HOST:PORT``).

    Args:
        spec: the pool's address.
        n: how many remotes.
        env_id: what they must serve.
        mode: ``"realtime"`` or ``"lockstep"``.
        options: the runtime's ``serve --option`` values.
        password: the pool's password (None: the address's).
        tls_ca: a CA bundle for a ``pool+tls://`` pool.

    Returns:
        The leased remotes; closing them releases the leases.

    Raises:
        ValueError: no ``env_id``, or ``spec`` is not a pool address.
        PoolError: the pool refused or had no remote in time (those claimed are released).
    """
    if not env_id:
        raise ValueError(f"a pool address ({spec}) serves remotes by env id: give env_id=...")
    client = PoolClient(parse_pool(spec), password, tls_ca)
    request: dict[str, Any] = {"env_id": env_id, "mode": mode}
    if options:
        request["options"] = options
    replies: list[dict[str, Any]] = []
    try:
        for _ in range(n):
            replies.append(client.claim(**request))
    except BaseException:
        if replies:
            try:
                client.release([r["lease"] for r in replies])
            except PoolError:
                pass
        raise
    return PooledRemotes(client, request, replies)
