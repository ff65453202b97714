"""The warm pool's service: remotes kept warm on this machine, handed out as leases over
HTTP+JSON on one port (``universe-remote pool``).

Holds :class:`PoolSpec` (what to keep warm), :class:`PoolService` (the asyncio shell
around :class:`~remotes.pool.table.PoolTable`) and :func:`serve_pool`. The shell owns the
remotes' processes (local ``serve`` processes, packed as :func:`remotes.local.start_local`
packs them: one process per remote up to ``SEPARATE_UNTIL``, then several games each;
lockstep: one process per core), moves bytes and keeps time; the table decides.

The API (JSON bodies; every route asks for the pool's password when it has one, as
OpenEnv's and MCP's ports do: ``Authorization: Bearer PW`` or Basic, throttled by
:class:`rewarder.throttle.AuthThrottle`):

    POST /v1/claim    {"env_id", "mode"?, "options"?, "seed"?, "wait"?, "deadline"?}
                      -> {"lease", "address", "password", "client_id", "deadline", ...}
    POST /v1/renew    {"leases": [id, ...]} -> {"leases": {id: {"alive", "expires_in"|"reason"}}}
    POST /v1/release  {"leases": [id, ...]} -> {"released": [...], "ended": {id: reason}}
    GET  /v1/status   warm / leased / resetting / failed per kind, claim latencies, leases
    GET  /            that, as a page a browser polls (remotes/static/pool.html)

**Taking a remote back.** A holder connects with its lease's rewarder client id
(``client_id``). When a lease ends — released, not renewed within the deadline, past its
maximum age, or its remote died — the pool connects to the remote with that same id: the
remote closes a holder still connected (one agent per remote, and the newer connection of
an id wins), and the pool resets it to a new episode (``v0.env.reset``, the kind's mode)
and puts it back. A remote that refuses or does not reset within :data:`RESET_TIMEOUT`,
fails its health check (VNC greeting and a ``running`` describe, as an observer, every
:data:`HEALTH_INTERVAL`), or whose process exits is ``failed``: its process is restarted
(with every game it serves: leases on its siblings end, saying why) and its remotes come
back as new ones. A failed remote is never handed out.

**Sessions of the remotes' own front ends** (``universe-remote pool --mcp --openenv``):
the remotes serve their MCP and OpenEnv ports too, and a claim answers their URLs
(``"mcp"``, ``"openenv"``). A session there is a lease like any other: its holder (the
``universe-remote mcp pool://...`` relay, or :func:`remotes.pool.sessions.claim_session`
for an OpenEnv client) sends the lease's client id as ``openai-client-id``, and taking
the remote back opens a session with that id on each of those ports first, which ends
the holder's (the newer session of an id wins there as on the rewarder; the ended one is
told why) and frees its seat before the reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final

import aiohttp
import orjson
from aiohttp import web

from rewarder.auth import given_password
from rewarder.client import RewarderClient
from rewarder.errors import RewarderError
from rewarder.protocol import CLIENT_ID_HEADER, TAKE_BACK_HEADER
from rewarder.throttle import AuthThrottle
from rewarder.tls import client_context

from ..address import RemoteAddress, parse_remotes
from ..capacity import OVERLOAD_NICE, REMOTES_SHARE, cores_per_remote
from ..group import RemoteGroup
from ..local import LocalRemotes, astart_local, default_games_per_process, probe_remote
from .table import DEFAULT_DEADLINE, DEFAULT_MAX_AGE, Kind, NoSuchKind, PoolTable, Warmth

log = logging.getLogger(__name__)

#: Seconds a claim waits for a warm remote by default (one being reset comes back in
#: milliseconds; a restarted process in about a second).
CLAIM_WAIT: Final = 30.0
#: Longest wait a claim may ask for: a client that wants longer asks again.
MAX_CLAIM_WAIT: Final = 300.0
#: Seconds taking a remote back may take (connect, reset, its first frame) before the
#: remote counts as misbehaving and its process is restarted.
RESET_TIMEOUT: Final = 20.0
#: Seconds between health checks of each warm remote.
HEALTH_INTERVAL: Final = 5.0
#: Seconds a health check may take.
HEALTH_TIMEOUT: Final = 5.0
#: Seconds between looks at the processes (one that exited is found within this).
PROCESS_POLL: Final = 0.1
#: First wait before a failed process is started again; doubles up to MAX_RESTART_DELAY.
RESTART_DELAY: Final = 0.5
MAX_RESTART_DELAY: Final = 30.0
#: Seconds a process start may take.
START_TIMEOUT: Final = 60.0
#: Bytes of a request body at most (a claim is a few hundred).
MAX_BODY_BYTES: Final = 64 * 1024
#: Leases one renew or release request may name (a vector env's, with room).
MAX_LEASES_PER_REQUEST: Final = 4096
#: Shortest renewal deadline a claim may ask for: the pool looks at the clock every
#: PROCESS_POLL, so a shorter one would not be kept.
MIN_DEADLINE: Final = 0.2
#: Remotes per env id at most (start_local's limit).
MAX_SIZE: Final = 256
#: The remotes' own front ends a pool may have them serve (``serve --mcp-port`` and
#: ``--openenv-port``; any free port each), whose URLs a claim answers.
FRONT_ENDS: Final = {"mcp": "--mcp-port", "openenv": "--openenv-port"}
#: The remotes' scheduling priority (``nice``): on a machine that also runs agents, the
#: remotes yield to them instead of starving them (issue 44: 256 real-time remotes on 2
#: cores left their agent 10 steps/s).
DEFAULT_NICE: Final = 5


def capacity_warning(specs: Sequence[PoolSpec], cores: int) -> str | None:
    """What to say before a pool overcommits this machine (its real-time remotes past what
    :mod:`remotes.capacity` says the cores hold), or None."""
    realtime = [s for s in specs if s.kind.mode == "realtime"]
    need = sum(s.size * cores_per_remote(s.kind.env_id, default_games_per_process(s.size)) for s in realtime)
    if need <= cores * REMOTES_SHARE:
        return None
    return (
        f"{sum(s.size for s in realtime)} real-time remotes take about {need:.1f} of this machine's "
        f"{cores} cores at 60 fps (CPU per frame as measured here), more than "
        f"{REMOTES_SHARE:.0%} of them: they start at nice {OVERLOAD_NICE} so agents here keep "
        "their CPU and every remote's frames come late instead; keep fewer warm, serve "
        "lockstep, or spread the pool over machines (--ray)"
    )


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One env id to keep warm: ``size`` remotes of ``kind``."""

    kind: Kind
    size: int

    def serve_args(self) -> list[str]:
        args = ["--mode", self.kind.mode]
        for key, value in self.kind.options:
            args += ["--option", f"{key}={value}"]
        return args


def parse_spec(text: str, size: int, mode: str) -> PoolSpec:
    """``ENV_ID[,size=N][,mode=M][,KEY=VALUE...]``: one env id with its own settings
    (``KEY=VALUE`` pairs are the runtime's ``serve --option``)."""
    env_id, *settings = [part.strip() for part in text.split(",")]
    options: dict[str, str] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key or not value:
            raise ValueError(
                f"cannot read {setting!r} in {text!r}: write ENV_ID[,size=N][,mode=lockstep][,KEY=VALUE]"
            )
        if key == "size":
            if not value.isdigit():
                raise ValueError(f"size={value!r} in {text!r} is not a number")
            size = int(value)
        elif key == "mode":
            mode = value
        else:
            options[key] = value
    if mode not in ("realtime", "lockstep"):
        raise ValueError(f"mode {mode!r} in {text!r}: use realtime or lockstep")
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"size {size} for {env_id}: a pool keeps 1..{MAX_SIZE} remotes of an env id")
    return PoolSpec(Kind(env_id, mode, tuple(sorted(options.items()))), size)


@dataclass(slots=True)
class _Process:
    """One ``serve`` process of the pool (on Ray: one actor's): its games' remote ids."""

    spec: PoolSpec
    games: int
    remotes: list[int] = field(default_factory=list)
    group: RemoteGroup | None = None
    restarts: int = 0
    restarting: bool = False


class BadRequest(ValueError):
    """A request the pool cannot read; the message says what to send."""


class PoolService:
    """The shell: processes, timers and the HTTP routes around one :class:`PoolTable`."""

    def __init__(
        self, specs: Sequence[PoolSpec], *, password: str | None = None,
        deadline: float = DEFAULT_DEADLINE, max_age: float = DEFAULT_MAX_AGE,
        nice: int = DEFAULT_NICE, health_interval: float = HEALTH_INTERVAL,
        clock: Callable[[], float] = time.monotonic, ray: str | None = None,
        docker: str | None = None, fronts: Sequence[str] = (),
    ) -> None:
        """``ray``: keep the remotes on a Ray cluster instead (``start_ray``'s address:
        "" for $RAY_ADDRESS or the cluster this process joined), one actor per remote,
        which the pool restarts itself (Ray's own restarts are off: a remote that comes
        back elsewhere would hold a lease the pool no longer tracks). ``docker``: keep them
        in containers of this image instead (``start_docker``; podman through its Docker
        API too), a container per remote. ``fronts``: the remotes also serve these of
        :data:`FRONT_ENDS` (local remotes only), their sessions leases too."""
        if ray is not None and docker is not None:
            raise ValueError("a pool keeps its remotes on Ray or in containers, not both")
        unknown = sorted(set(fronts) - FRONT_ENDS.keys())
        if unknown:
            raise ValueError(f"no front end {', '.join(unknown)}: a pool's remotes may serve "
                             f"{', '.join(FRONT_ENDS)}")
        if fronts and (ray is not None or docker is not None):
            raise ValueError("MCP and OpenEnv ports of pooled remotes are served by local remotes only "
                             "(leave out --ray and --docker)")
        self.fronts = tuple(sorted(set(fronts)))
        #: Each remote's front-end URLs by name (``{"mcp": "http://...:P/mcp"}``).
        self.front_urls: dict[int, dict[str, str]] = {}
        self.specs = list(specs)
        self.ray = ray
        self.docker = docker
        #: Whether remotes have no local process the pool watches: health checks then
        #: cover leased remotes too.
        self.remote_processes = ray is None and docker is None
        self._docker_runs = asyncio.Lock()  # start_docker picks free ports: one at a time
        self.table = PoolTable(deadline=deadline, max_age=max_age)
        self.password = password  # the pool's API password
        #: The remotes' password: every claim carries it, nobody else needs it.
        self.remote_password = secrets.token_urlsafe(12)
        self.nice = nice
        self.health_interval = health_interval
        self.clock = clock
        self.throttle = AuthThrottle()
        self.processes: list[_Process] = []
        self._warm = asyncio.Condition()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._http: aiohttp.ClientSession | None = None  # taking back front-end sessions

    # Lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every process (claims wait for them) and the timers."""
        warning = capacity_warning(self.specs, os.cpu_count() or 1)
        if warning is not None:
            log.warning("%s", warning)
            self.nice = max(self.nice, OVERLOAD_NICE)
        for spec in self.specs:
            lockstep = spec.kind.mode == "lockstep"
            # (an actor or a container is the unit of placement and restart: one remote each)
            games = default_games_per_process(spec.size, lockstep=lockstep) if self.remote_processes else 1
            processes = -(-spec.size // games)
            split = [spec.size // processes + (i < spec.size % processes) for i in range(processes)]
            for k in split:
                process = _Process(spec, k)
                self.processes.append(process)
                self._spawn(self._start_process(process))
        self._spawn(self._watch())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("pool task failed: %r", exc, exc_info=exc)

    async def close(self) -> None:
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
        groups = [p.group for p in self.processes if p.group is not None]
        await asyncio.gather(*(asyncio.to_thread(g.close) for g in groups), return_exceptions=True)

    async def _start_process(self, process: _Process) -> None:
        """Start (or start again, with backoff) one process and add its remotes as warm."""
        now = self.clock()
        process.remotes = [self.table.add(process.spec.kind, id(process), now) for _ in range(process.games)]
        delay = min(RESTART_DELAY * 2 ** max(process.restarts - 1, 0), MAX_RESTART_DELAY)
        while not self._closing:
            if process.restarts:
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RESTART_DELAY)
            try:
                group = await self._launch(process)
            except (RuntimeError, OSError, TimeoutError, subprocess.SubprocessError) as exc:
                process.restarts += 1
                log.warning("a pool process of %s failed to start: %s", process.spec.kind.env_id, exc)
                continue
            process.group = group
            now = self.clock()
            containers = getattr(group, "containers", None) or [None] * len(group)
            for i, (rid, address, pid, container) in enumerate(zip(
                    process.remotes, group.addresses, _pids(group), containers, strict=True)):
                self.table.started(rid, str(address), now, pid, container)
                if isinstance(group, LocalRemotes) and self.fronts:
                    self.front_urls[rid] = _front_urls(group, i)
            process.restarting = False
            log.info("warm: %s", ", ".join(str(a) for a in group.addresses))
            await self._notify()
            return

    def _restart_soon(self, process: _Process, why: str) -> None:
        """Restart a process that failed, unless that is under way already."""
        if process.restarting or self._closing:
            return
        process.restarting = True
        self._spawn(self._restart(process, why))

    async def _launch(self, process: _Process) -> RemoteGroup:
        """Start one process's remotes: local ``serve`` processes, or Ray actors."""
        kind = process.spec.kind
        if self.docker is not None:
            from ..containers import start_docker

            async with self._docker_runs:
                return await asyncio.to_thread(
                    start_docker, kind.env_id, process.games, image=self.docker,
                    password=self.remote_password, start_timeout=START_TIMEOUT,
                    args=process.spec.serve_args(),
                )
        if self.ray is None:
            fronts = [arg for name in self.fronts for arg in (FRONT_ENDS[name], "0")]
            return await astart_local(
                kind.env_id, process.games, password=self.remote_password, start_timeout=START_TIMEOUT,
                extra_args=[*process.spec.serve_args(), *fronts], nice=self.nice,
                games_per_process=process.games,
            )
        from ..ray import start_ray

        return await asyncio.to_thread(
            start_ray, kind.env_id, process.games, address=self.ray or None, password=self.remote_password,
            spread=False, max_restarts=0, start_timeout=START_TIMEOUT, extra_args=process.spec.serve_args(),
        )

    async def _restart(self, process: _Process, why: str) -> None:
        """Stop a process that failed (every game of it) and start a new one."""
        now = self.clock()
        for rid in process.remotes:
            self.table.died(rid, why, now)
        group, process.group = process.group, None
        if group is not None:
            await asyncio.to_thread(group.close)
        for rid in process.remotes:
            self.table.retire(rid)
            self.front_urls.pop(rid, None)
        process.restarts += 1
        log.warning("restarting a pool process of %s: %s", process.spec.kind.env_id, why)
        await self._start_process(process)

    async def _notify(self) -> None:
        async with self._warm:
            self._warm.notify_all()

    # Timers --------------------------------------------------------------------------------

    async def _watch(self) -> None:
        """Every :data:`PROCESS_POLL`: leases the clock ended, processes that exited,
        health checks that are due."""
        checked: dict[int, float] = {}
        while True:
            now = self.clock()
            self.table.expire(now)
            self._reset_due()
            for process in self.processes:
                group = process.group
                if not isinstance(group, LocalRemotes) or process.restarting:
                    continue  # (a Ray actor's remote: its health checks, below, find it gone)
                code = group.processes[0].poll()
                if code is not None:
                    self._restart_soon(process, f"its process exited with status {code}")
            for gone in checked.keys() - self.table.remotes.keys():
                del checked[gone]
            for rid, remote in list(self.table.remotes.items()):
                due = now - checked.get(rid, remote.since) >= self.health_interval
                # Warm remotes are checked; on Ray leased ones too (no process to watch).
                checked_states = (Warmth.WARM,) if self.remote_processes else (Warmth.WARM, Warmth.LEASED)
                if remote.state in checked_states and due:
                    checked[rid] = now
                    self._spawn(self._check(rid))
            await asyncio.sleep(PROCESS_POLL)

    def _process_of(self, rid: int) -> _Process | None:
        return next((p for p in self.processes if rid in p.remotes), None)

    def _address(self, rid: int) -> RemoteAddress:
        remote = self.table.remotes[rid]
        assert remote.address is not None
        (address,), _ = parse_remotes(remote.address)
        return address

    async def _check(self, rid: int) -> None:
        """A warm remote's health check; a failed one restarts its process."""
        try:
            await probe_remote(self._address(rid), self.remote_password, HEALTH_TIMEOUT)
        except (OSError, TimeoutError, RewarderError, ConnectionError) as exc:
            remote = self.table.remotes.get(rid)
            if remote is None or remote.state not in (Warmth.WARM, Warmth.LEASED):
                return
            why = f"failed its health check: {exc or type(exc).__name__}"
            if remote.state is Warmth.LEASED:  # (Ray, containers) its holder's lease ends, saying why
                self.table.died(rid, why, self.clock())
            else:
                self.table.check_failed(rid, why, self.clock())
            if (process := self._process_of(rid)) is not None:
                self._restart_soon(process, f"remote {remote.address} {why}")

    async def _take_back(self, rid: int) -> None:
        """A lease ended: close its holder (same client id), reset the remote, warm again."""
        remote = self.table.remotes.get(rid)
        if remote is None or remote.state is not Warmth.RESETTING:
            return
        address = self._address(rid)
        assert address.rewarder is not None
        client = RewarderClient(
            address.rewarder, password=self.remote_password, reconnect=False, calibration_pings=0,
            client_id=self.table.last_client_id(rid), start_timeout=RESET_TIMEOUT, name=f"pool {address}",
            tls=client_context() if address.tls else None,
        )
        try:
            async with asyncio.timeout(RESET_TIMEOUT):
                await self._end_sessions(rid, self.table.last_client_id(rid))
            async with asyncio.timeout(RESET_TIMEOUT), client:
                episode = await client.reset(env_id=remote.kind.env_id, mode=remote.kind.mode)
                await client.wait_for_state("running", episode_id=episode)
        except (OSError, TimeoutError, RewarderError, ConnectionError, aiohttp.ClientError) as exc:
            remote = self.table.remotes.get(rid)
            if remote is None or remote.state is not Warmth.RESETTING:
                return  # it died meanwhile: the process watch restarts it
            why = f"could not be reset: {exc or type(exc).__name__}"
            self.table.check_failed(rid, why, self.clock())
            if (process := self._process_of(rid)) is not None:
                self._restart_soon(process, f"remote {remote.address} {why}")
            return
        remote = self.table.remotes.get(rid)
        if remote is not None and remote.state is Warmth.RESETTING:
            self.table.reset_done(rid, self.clock())
            await self._notify()

    async def _end_sessions(self, rid: int, client_id: str | None) -> None:
        """End the lease holder's sessions on the remote's MCP and OpenEnv ports, and retire
        its client id there (:data:`rewarder.protocol.TAKE_BACK_HEADER`): a client that
        reconnects by itself is refused, told that the pool took the remote back."""
        urls = self.front_urls.get(rid)
        if not urls or not client_id:
            return
        headers = {"Authorization": f"Bearer {self.remote_password}", CLIENT_ID_HEADER: client_id,
                   TAKE_BACK_HEADER: "true"}
        if self._http is None:
            self._http = aiohttp.ClientSession()
        http = self._http
        if "mcp" in urls:
            async with http.delete(urls["mcp"], headers=headers) as answer:
                answer.raise_for_status()
        if "openenv" in urls:
            async with http.ws_connect(urls["openenv"] + "/ws", headers=headers) as ws:
                await ws.receive()  # (the port closes it once the id is retired)

    # Requests ------------------------------------------------------------------------------

    async def claim(self, body: dict[str, Any]) -> dict[str, Any]:
        """Lease a warm remote (waiting up to ``wait`` seconds for one)."""
        started = time.perf_counter()
        env_id = body.get("env_id")
        if not isinstance(env_id, str) or not env_id:
            raise BadRequest('a claim names its "env_id" (e.g. {"env_id": "builtin.Catch-v0"})')
        mode, options, seed = body.get("mode"), body.get("options"), body.get("seed")
        if mode is not None and mode not in ("realtime", "lockstep"):
            raise BadRequest(f'"mode" {mode!r}: use "realtime" or "lockstep" (or leave it out)')
        if options is not None and not isinstance(options, dict):
            raise BadRequest('"options" is an object of runtime options ({"KEY": "VALUE"})')
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise BadRequest(f'"seed" {seed!r} is not an integer')
        wait = body.get("wait", CLAIM_WAIT)
        if not isinstance(wait, int | float) or isinstance(wait, bool) or not 0 <= wait <= MAX_CLAIM_WAIT:
            raise BadRequest(f'"wait" {wait!r}: seconds to wait for a warm remote, 0..{MAX_CLAIM_WAIT:g}')
        short = body.get("deadline")
        if short is not None and (not isinstance(short, int | float) or isinstance(short, bool)
                                  or not MIN_DEADLINE <= short <= self.table.deadline):
            raise BadRequest(f'"deadline" {short!r}: seconds between renewals this holder needs, '
                             f"{MIN_DEADLINE:g}..{self.table.deadline:g} (the pool's)")
        deadline = time.monotonic() + wait
        async with self._warm:
            while True:
                lease = self.table.claim(env_id, mode, options, seed, self.clock(), short)
                if lease is not None:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _NoneWarm(self._none_warm(env_id, wait))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._warm.wait()
        remote = self.table.remotes[lease.remote]
        assert remote.address is not None
        self.table.note_claim(time.perf_counter() - started)
        return {
            "lease": lease.id, "address": remote.address, "password": self.remote_password,
            "client_id": lease.client_id, "deadline": lease.deadline, "max_age": lease.max_age,
            **remote.kind.describe(), "seed": seed, **self.front_urls.get(lease.remote, {}),
        }

    def _none_warm(self, env_id: str, wait: float) -> str:
        counts = {w.value: 0 for w in Warmth}
        for remote in self.table.remotes.values():
            if remote.kind.env_id == env_id:
                counts[remote.state.value] += 1
        listed = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
        return f"no warm remote of {env_id} within {wait:g} s ({listed}); try again, or start a larger pool"

    def _reset_due(self) -> None:
        """Take back every remote whose lease the table ended."""
        for rid in self.table.take_resets():
            self._spawn(self._take_back(rid))

    def renew(self, body: dict[str, Any]) -> dict[str, Any]:
        answers = self.table.renew(_lease_ids(body), self.clock())
        self._reset_due()  # a renewal that came late found its lease ended by the clock
        return {"leases": answers}

    def release(self, body: dict[str, Any]) -> dict[str, Any]:
        released, ended = [], {}
        now = self.clock()
        for lid in _lease_ids(body):
            if lid in self.table.leases:
                self.table.release(lid, now)
                released.append(lid)
            else:
                ended[lid] = self.table.why_ended(lid)
        self._reset_due()
        return {"released": released, "ended": ended}

    def status(self) -> dict[str, Any]:
        return self.table.status(self.clock())

    # HTTP ----------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/v1/claim", self._route(self.claim))
        app.router.add_post("/v1/renew", self._route(self.renew))
        app.router.add_post("/v1/release", self._route(self.release))
        app.router.add_get("/v1/status", self._get_status)
        app.router.add_get("/", self._page)
        return app

    async def _page(self, request: web.Request) -> web.Response:
        """The status page: warm / leased / resetting / failed, claims, leases, live."""
        page = resources.files("remotes.static").joinpath("pool.html").read_bytes()
        return web.Response(body=page, content_type="text/html")

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """The pool's password, as every HTTP port of the project asks for it."""
        if self.password is None:
            return await handler(request)  # type: ignore[no-any-return]
        peer = request.remote
        refused = self.throttle.admit(peer)
        if refused is not None:
            return _error(web.HTTPTooManyRequests, refused)
        given = given_password(request.headers.get("Authorization"))
        right = given is not None and hmac.compare_digest(given.encode(), self.password.encode())
        if not right:
            if given is None:  # no guess made (as OpenEnv's port): nothing compared or counted
                self.throttle.abandoned(peer)
            else:
                self.throttle.failed(peer, "the pool port")
            denied = _error(web.HTTPUnauthorized, "wrong password for this pool" if given is not None
                            else "this pool needs its password: 'Authorization: Bearer PASSWORD'")
            denied.headers["WWW-Authenticate"] = 'Basic realm="universe-remote pool"'  # a browser asks
            return denied
        self.throttle.succeeded(peer)
        return await handler(request)  # type: ignore[no-any-return]

    def _route(self, call: Callable[[dict[str, Any]], Any]) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.Response:
            try:
                body = orjson.loads(await request.read() or b"{}")
                if not isinstance(body, dict):
                    raise BadRequest("the body is a JSON object")
                result = call(body)
                if asyncio.iscoroutine(result):
                    result = await result
            except (orjson.JSONDecodeError, BadRequest, NoSuchKind) as exc:
                return _error(web.HTTPBadRequest, str(exc))
            except _NoneWarm as exc:
                return _error(web.HTTPServiceUnavailable, str(exc))
            return web.Response(body=orjson.dumps(result), content_type="application/json")

        return handle

    async def _get_status(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.status()), content_type="application/json")


def _front_urls(group: LocalRemotes, i: int) -> dict[str, str]:
    """Remote ``i``'s MCP and OpenEnv URLs (those it serves)."""
    host = group.addresses[i].host
    urls = {}
    if i < len(group.mcp_ports) and (port := group.mcp_ports[i]):
        urls["mcp"] = f"http://{host}:{port}/mcp"
    if i < len(group.openenv_ports) and (port := group.openenv_ports[i]):
        urls["openenv"] = f"http://{host}:{port}"
    return urls


def _pids(group: RemoteGroup) -> list[int | None]:
    """Each remote's serving process, where the group knows it."""
    if isinstance(group, LocalRemotes):
        return [group.process_of(i).pid for i in range(len(group))]
    placements = getattr(group, "placements", None)
    return [p.pid for p in placements] if placements else [None] * len(group)


class _NoneWarm(Exception):
    """No warm remote within the claim's wait."""


def _lease_ids(body: dict[str, Any]) -> list[str]:
    ids = body.get("leases")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise BadRequest('name the leases: {"leases": ["LEASE_ID", ...]}')
    if len(ids) > MAX_LEASES_PER_REQUEST:
        raise BadRequest(f"{len(ids)} leases in one request; at most {MAX_LEASES_PER_REQUEST}")
    return ids


def _error(kind: type[web.HTTPException], message: str) -> web.Response:
    return web.Response(status=kind.status_code, body=orjson.dumps({"error": message}),
                        content_type="application/json")


async def serve_pool(
    specs: Sequence[PoolSpec], *, host: str = "127.0.0.1", port: int = 0,
    password: str | None = None, ssl_context: Any = None,
    ready: Callable[[PoolService, int], None] | None = None,
    **options: Any,
) -> None:
    """Run the pool until cancelled: ``ready(service, port)`` once it listens."""
    service = PoolService(specs, password=password, **options)
    runner = web.AppRunner(service.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    server = site._server  # the bound port when 0 was asked for
    bound = server.sockets[0].getsockname()[1] if server is not None else port  # type: ignore[attr-defined]
    try:
        await service.start()
        if ready is not None:
            ready(service, bound)
        await asyncio.Event().wait()
    finally:
        await service.close()
        await runner.cleanup()

