"""Sessions of a pooled remote's own front ends — its OpenEnv port, its MCP port — held as
pool leases (issue 44: "OpenEnv and MCP sessions on pooled remotes are leases too").

A pool started with ``--openenv`` or ``--mcp`` has its remotes serve those ports, and a
claim answers their URLs. :func:`claim_session` claims one remote and gives what a
front end's client needs — ``openenv_url`` / ``mcp_url`` and :attr:`PoolSession.headers`
(the remote's password, and the lease's client id as ``openai-client-id``) — and renews
the lease in the background (on the process's loop thread, every ``deadline /
RENEW_SPLIT``) until :meth:`PoolSession.close` releases it::

    from openenv.core.generic_client import GenericEnvClient
    from remotes.pool import claim_session

    with claim_session("pool://127.0.0.1:8900", "builtin.Catch-v0") as lease:
        with GenericEnvClient(base_url=lease.openenv_url, headers=lease.headers).sync() as env:
            env.reset(seed=0)

A holder that dies stops renewing: the pool ends the lease within its deadline and takes
the remote back, opening a session with the lease's client id on each front end, which
ends the holder's (its seat is free at once) before the remote is reset for the next
claimer. A session whose lease ended is told so by the remote — OpenEnv's client raises
the ``SESSION_ERROR`` "closed: replaced by a newer connection with the same client id
...: a pool took this remote back ..."; the MCP relay answers a tool error naming the
lease — never a silent zero reward. ``universe-remote mcp pool://HOST:PORT --env-id ID``
(:mod:`universe_remote.mcp_proxy`) holds its MCP session this way.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections.abc import Sequence
from typing import Any, Final

from rewarder.protocol import CLIENT_ID_HEADER

from ..loop import shared_loop
from .client import CLAIM_WAIT, RENEW_SPLIT, PoolClient, PoolError, parse_pool

log = logging.getLogger(__name__)

#: The front ends a session may need, and the pool option that has its remotes serve them.
FRONT_OPTIONS: Final = {"openenv": "--openenv", "mcp": "--mcp"}


class PoolSession:
    """One leased remote for a front end's session: its URLs and headers, renewed in the
    background; :attr:`lost` says why the lease ended (None while it lives)."""

    def __init__(self, client: PoolClient, request: dict[str, Any], reply: dict[str, Any]) -> None:
        """Hold the lease a claim granted (made by :func:`claim_session`).

        Args:
            client: The pool's client, which renews and releases the lease.
            request: The claim's arguments, claimed again by :meth:`replace`.
            reply: The pool's answer to the claim (lease, client id, address, URLs).
        """
        self.client = client
        self.request = request
        self._lock = threading.Lock()
        self._closed = False
        self._take(reply)
        self._renewer = shared_loop().submit(self._renew_loop())
        atexit.register(self.close)

    def _take(self, reply: dict[str, Any]) -> None:
        with self._lock:
            self.lease: str = reply["lease"]
            self.client_id: str = reply["client_id"]
            self.deadline = float(reply["deadline"])
            self.address: str = reply["address"]
            self.password: str | None = reply.get("password")
            self.openenv_url: str | None = reply.get("openenv")
            self.mcp_url: str | None = reply.get("mcp")
            #: Why the lease ended (the pool's words), or None while it lives.
            self.lost: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        """What a front end's client sends: the remote's password, the lease's client id."""
        headers = {CLIENT_ID_HEADER: self.client_id}
        if self.password:
            headers["Authorization"] = f"Bearer {self.password}"
        return headers

    def check(self) -> str | None:
        """Ask the pool now (blocking): why the lease ended, or None while it lives (a
        pool that does not answer is not taken as an end).

        Returns:
            The pool's reason the lease ended, or None while it lives.
        """
        lease = self.lease
        if self.lost is None:
            try:
                answer = self.client.renew([lease]).get(lease, {})
            except PoolError as exc:
                log.debug("renewing %s: %s", lease, exc)
                return None
            if not answer.get("alive") and self.lease == lease:
                self.lost = str(answer.get("reason", "ended"))
        return self.lost

    def replace(self, wait: float = CLAIM_WAIT) -> None:
        """After a loss: claim another remote of the same kind (blocking).

        Args:
            wait: Seconds to wait for a free remote.

        Raises:
            RuntimeError: The lease is still alive.
            PoolError: The pool refused the claim or had no remote in time.
        """
        if self.lost is None:
            raise RuntimeError("the lease is alive: replace() follows a lost one")
        self._take(self.client.claim(**self.request, wait=wait))

    async def _renew_loop(self) -> None:
        """On the loop thread: renew the lease every ``deadline / RENEW_SPLIT`` s."""
        while True:
            lease = self.lease
            if self.lost is None:
                try:
                    answers = await asyncio.to_thread(self.client.renew, [lease])
                except PoolError as exc:
                    log.warning("renewing pool lease %s: %s", lease, exc)
                    answers = {}
                answer = answers.get(lease)
                if answer is not None and not answer.get("alive") and self.lease == lease:
                    self.lost = str(answer.get("reason", "ended"))
                    log.warning("pool lease %s of %s ended: %s", lease, self.address, self.lost)
            await asyncio.sleep(self.deadline / RENEW_SPLIT)

    def close(self) -> None:
        """Stop renewing and release the lease (the pool takes the remote back)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._renewer.cancel()
        if self.lost is None:
            try:
                self.client.release([self.lease])
            except PoolError as exc:  # the pool ends it at its deadline anyway
                log.warning("releasing pool lease %s: %s", self.lease, exc)

    def __enter__(self) -> PoolSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def claim_session(
    pool: str, env_id: str, *, mode: str | None = None, options: dict[str, Any] | None = None,
    seed: int | None = None, needs: Sequence[str] = ("openenv",), password: str | None = None,
    tls_ca: str | None = None, wait: float = CLAIM_WAIT,
) -> PoolSession:
    """Lease a remote of ``env_id`` from ``pool`` (``pool://HOST:PORT``) for a session of
    its ``needs`` front ends (``"openenv"``, ``"mcp"``); :class:`PoolError` when the pool
    refuses or its remotes do not serve them (the lease is released).

    Args:
        pool: The pool's address, ``pool://HOST:PORT``.
        env_id: The env id to lease a remote of.
        mode: ``"lockstep"`` or ``"realtime"``; None: the pool's mode for the id.
        options: The env id's options the remote must have.
        seed: The seed of the leased remote's first episode.
        needs: The front ends the session uses, of ``"openenv"`` and ``"mcp"``.
        password: The pool's password.
        tls_ca: A CA file to check the pool's TLS certificate against.
        wait: Seconds to wait for a free remote.

    Returns:
        The lease, renewed in the background until :meth:`PoolSession.close`.

    Raises:
        ValueError: ``needs`` names a front end there is none of.
        PoolError: The pool refused, or its remotes do not serve ``needs``.
    """
    unknown = sorted(set(needs) - FRONT_OPTIONS.keys())
    if unknown:
        raise ValueError(f"no front end {', '.join(unknown)}: a session needs {' or '.join(FRONT_OPTIONS)}")
    client = PoolClient(parse_pool(pool), password, tls_ca)
    request: dict[str, Any] = {"env_id": env_id}
    for key, value in (("mode", mode), ("options", options), ("seed", seed)):
        if value is not None:
            request[key] = value
    reply = client.claim(**request, wait=wait)
    missing = [name for name in needs if not reply.get(name)]
    if missing:
        try:
            client.release([reply["lease"]])
        finally:
            starts = " ".join(FRONT_OPTIONS[name] for name in missing)
            raise PoolError(f"the pool at {pool} serves {env_id} without its {' and '.join(missing)} "
                            f"port: start it with `universe-remote pool ... {starts}`")
    return PoolSession(client, request, reply)
