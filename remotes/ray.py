"""Remotes on a Ray cluster: the counterpart of :func:`remotes.local.start_local` over
many machines.

Holds :func:`start_ray`, :class:`RayRemotes`, :class:`RemoteActor` (the body of each
actor), :class:`Placement` (what an actor reports) and :class:`RayUnavailable`. Ray is
imported only when a function here is called (``pip install 'universe-remote[ray]'``).

Each remote is one Ray actor that starts ``universe-remote serve`` on its node, bound to
the node's address on free ports (``start_local``'s spawning and banner reading, with
``host=``), and reports where it serves. When that process dies the actor ends itself
with it (``os._exit``), so Ray restarts the actor (``max_restarts``) — on the same node
while it has room, on another one if the node is gone — and the new process serves on
new ports. :meth:`RayRemotes.address_of` asks the actor where its remote is now; a
``RemoteVectorEnv(group)`` asks it before each probe of a remote that dropped, so it
follows the replacement without stopping the others.

Spread: with ``spread=True`` one placement group of ``n`` bundles with strategy
``SPREAD`` reserves room for every remote at once (nothing starts unless all fit) and
puts them on as many nodes as it can. Measured on two nodes of 8 CPUs, 0.25 CPU each:
the placement group and the ``"SPREAD"`` scheduling strategy both split 4 and 16 remotes
evenly, but the strategy alone put 3 of 4 zero-CPU actors on one node, and it reserves
nothing up front. ``spread=False`` lets Ray's default scheduler pack them.

Security: a remote always has a password (a random one when none is given), and one
that binds a node's non-loopback address serves TLS when ``tls=`` names a certificate
and key present on every node, else ``--insecure`` (clear text behind the password:
a cluster's private network; docs/cluster.md).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from runtimes import registry
from vncdriver.addresses import is_loopback

from .address import RemoteAddress
from .group import RemoteGroup
from .local import start_local

if TYPE_CHECKING:
    import subprocess

log = logging.getLogger(__name__)

#: Remotes one call may start (the address grammar's limit too).
MAX_RAY_REMOTES: Final = 1024
#: What each remote reserves unless ``resources=`` says: a builtin or Atari remote uses
#: a small part of a core at 60 fps (``python -m benchmarks ray_remotes``); a browser
#: remote wants ``{"CPU": 1}``.
DEFAULT_RESOURCES: Final[Mapping[str, float]] = {"CPU": 0.25}
#: Times Ray restarts an actor whose remote died, over the group's life.
DEFAULT_MAX_RESTARTS: Final = 10
#: Seconds :meth:`RayRemotes.address_of` waits for an actor's answer before it returns
#: the last known address (a restarting actor answers once its new remote serves).
ADDRESS_WAIT: Final = 0.5
#: Seconds :meth:`RayRemotes.close` gives the actors to stop their remotes before it
#: kills them (their remotes then get SIGTERM from the kernel: PR_SET_PDEATHSIG).
STOP_TIMEOUT: Final = 10.0
#: Characters of a generated password (VNC's DES authentication uses 8).
PASSWORD_CHARS: Final = 8
#: Exit status of an actor whose remote died: Ray restarts an actor that exits this way.
EXIT_REMOTE_DIED: Final = 70
#: Characters of a dead remote's log an actor prints before it exits (Ray's worker log).
LOG_TAIL: Final = 2000
#: Seconds to wait for the cluster's address to accept a TCP connection before ``ray.init``
#: dials it: a cluster that is gone refuses at once (Ray itself retries it for minutes).
PROBE_TIMEOUT: Final = 5.0
#: Seconds ``ray.init`` may take to join a cluster that did accept the probe, or to start a
#: new local one (seconds, in a namespace; a port that accepts and never speaks Ray's
#: protocol hangs it).
INIT_TIMEOUT: Final = 60.0
#: Ray's switch (ray._private.ray_constants) that, off, makes a new node take 127.0.0.1.
LOOPBACK_SWITCH: Final = "ENABLE_RAY_CLUSTER"
#: Where Ray keeps the address of the cluster ``ray start`` last started, under its temp
#: directory; ``ray.init()`` without an address joins it (Ray's own lookup).
CURRENT_CLUSTER_FILE: Final = "ray_current_cluster"
#: Resource names that have their own ``ray.remote`` option.
_OPTION_NAMES: Final = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}


class RayUnavailable(RuntimeError):
    """Ray is missing, or the cluster cannot hold the remotes; the message says what to do."""


class RayListensWidely(UserWarning):
    """A local Ray cluster started here listens beyond loopback; the message says where."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one actor's remote serves: its address, the Ray node, the remote process's
    pid and the actor's own, and whether Ray restarted this actor."""

    address: RemoteAddress
    node_id: str
    pid: int
    actor_pid: int
    restarted: bool


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable(
            "Ray is not installed: pip install 'universe-remote[ray]' (ray[default] 2.x) on "
            "this machine and on every node of the cluster"
        ) from None
    return ray


def _current_cluster_file() -> str:
    """The file where ``ray start`` leaves the current cluster's address (Ray's lookup:
    $RAY_TMPDIR, else $TMPDIR, else /tmp, then ``ray/``)."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, "ray", CURRENT_CLUSTER_FILE)


def cluster_address(address: str | None) -> tuple[str | None, str]:
    """The cluster ``ray.init(address)`` would dial, and where that address came from;
    (None, ...) when it starts a new local cluster instead. As Ray looks: ``address``,
    else $RAY_ADDRESS, else (for None and ``"auto"``) the file ``ray start`` left."""
    if address not in (None, "auto"):
        return (None if address == "local" else address), "the address given"
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "$RAY_ADDRESS"
    path = _current_cluster_file()
    try:
        with open(path) as f:
            found = f.read().strip()
    except OSError:
        found = ""
    return (found or None), path


def check_cluster(address: str | None, timeout: float = PROBE_TIMEOUT) -> None:
    """Raise :class:`RayUnavailable` when the cluster ``ray.init(address)`` would join does
    not accept a connection within ``timeout``: Ray would retry it for minutes, silently.
    The message says where the address came from and what to do."""
    target, source = cluster_address(address)
    if target is None:
        return
    where = target.removeprefix("ray://").rstrip("/")
    host, sep, port = where.rpartition(":")
    if not sep or not port.isdigit():
        return  # Ray's own parser says what is wrong with it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        return
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    if source.endswith(CURRENT_CLUSTER_FILE):
        raise RayUnavailable(
            f"no Ray cluster answers at {target} ({why}), the address {source} names: "
            "`ray start` left it there and that cluster is gone. Start a new local cluster "
            "with --ray local (start_ray(address='local')), name a running one with --ray "
            "ADDRESS, or remove the file (`ray stop` does)"
        )
    raise RayUnavailable(
        f"no Ray cluster answers at {target} ({why}; {source}): is it running (ray start "
        "--head)? Check the address, or pass --ray local (address='local') to start a new "
        "local cluster"
    )


def init_ray(ray: Any, address: str | None, timeout: float = INIT_TIMEOUT) -> None:
    """``ray.init(address)``, after :func:`check_cluster`, within ``timeout`` seconds:
    :class:`RayUnavailable` instead of Ray's minutes of retries.

    ``ray.init`` runs in a thread of its own (the timeout) that lives as long as this
    process: Ray starts a new local cluster's head processes with ``PR_SET_PDEATHSIG``,
    which Linux fires when the *thread* that forked them exits. A new local cluster
    (``address`` None or ``"local"`` with no cluster to join) listens on loopback only
    (:func:`_init_local`)."""
    check_cluster(address)
    target, source = cluster_address(address)
    local = target is None and address in (None, "local")
    started = threading.Event()
    failure: list[BaseException] = []

    def init() -> None:
        try:
            if local:
                _init_local(ray)
            else:
                ray.init(address=address, logging_level=logging.WARNING)
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)
        finally:
            started.set()
        _HEAD_KEEPER.wait()  # never set: a local head's processes die with this thread

    threading.Thread(target=init, name="universe-remote-ray-init", daemon=True).start()
    if not started.wait(timeout):
        if local:
            raise RayUnavailable(
                f"Ray did not start a new local cluster within {timeout:g} s: the machine may "
                "be overloaded (pass a larger init_timeout=), or see Ray's logs under "
                f"{os.path.dirname(_current_cluster_file())}/session_latest/logs"
            )
        raise RayUnavailable(
            f"Ray did not join the cluster at {target or 'a new local cluster'} ({source}) "
            f"within {timeout:g} s: something answers there that is not a Ray cluster's "
            "head, or it is overloaded. Check the address, or pass --ray local "
            "(address='local') to start a new local cluster"
        )
    if failure:
        raise failure[0]
    if local:
        _check_local_listens(ray)


#: Never set: the thread that called ``ray.init`` waits on it for the process's life.
_HEAD_KEEPER: Final = threading.Event()
#: The logger of Ray's ``ray.init`` and the note it logs when called off the main thread.
RAY_WORKER_LOGGER: Final = "ray._private.worker"
OFF_MAIN_THREAD_NOTE: Final = "current thread is not the main thread"


class _OffMainThreadOnPurpose(logging.Filter):
    """Drops Ray's warning that ``ray.init`` ran off the main thread: :func:`init_ray` does
    so on purpose (its timeout), and the warning reads like a fault to a user."""

    def filter(self, record: logging.LogRecord) -> bool:
        return OFF_MAIN_THREAD_NOTE not in record.getMessage()


logging.getLogger(RAY_WORKER_LOGGER).addFilter(_OffMainThreadOnPurpose())


def _init_local(ray: Any) -> None:
    """Start a new local cluster whose processes listen on 127.0.0.1 only.

    Ray binds every interface once it picks the machine's address as the node's (and
    turns ``_node_ip_address="127.0.0.1"`` into that address); it takes loopback when
    its ``ENABLE_RAY_CLUSTER`` switch is off (what $RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
    sets at import), so the switch is off for this call. Its workers learn the node's
    address from the raylet. :func:`_check_local_listens` catches a Ray where this moved."""
    ray_constants: Any = None
    try:
        from ray._private import ray_constants
    except ImportError:  # a Ray without the switch: _check_local_listens says so
        pass
    saved = getattr(ray_constants, LOOPBACK_SWITCH, None)
    if saved is not None:
        setattr(ray_constants, LOOPBACK_SWITCH, False)
    try:
        ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING)
    finally:
        if saved is not None:
            setattr(ray_constants, LOOPBACK_SWITCH, saved)


def _check_local_listens(ray: Any) -> None:
    """Warn (:class:`RayListensWidely`) when the local cluster just started advertises an
    address off loopback: its processes then listen on every interface."""
    host = ray.util.get_node_ip_address()
    if is_loopback(host):
        return
    warnings.warn(RayListensWidely(
        f"the new local Ray cluster listens on every interface of this machine (its node is "
        f"{host}, its head {ray.get_runtime_context().gcs_address}): anyone who reaches these "
        "ports can run code in it. Keep it local with a firewall or a network namespace "
        "(unshare --net); Ray takes 127.0.0.1 when RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is set "
        "before it is imported"
    ), stacklevel=3)


def serve_args(host: str, tls: tuple[str, str] | None, extra_args: Sequence[str]) -> list[str]:
    """``serve``'s arguments for a remote bound to ``host``: TLS with ``tls``'s files,
    else ``--insecure`` off loopback (the password is always set)."""
    args = list(extra_args)
    if tls is not None:
        cert, key = tls
        args += ["--tls-cert", cert, "--tls-key", key]
    elif not is_loopback(host) and "--insecure" not in args:
        args.append("--insecure")
    return args


class RemoteActor:
    """One remote on this actor's node (the class :func:`start_ray` hands ``ray.remote``).

    Starts ``universe-remote serve`` bound to the node's address and, when that process
    exits without :meth:`stop`, ends this process so that Ray restarts the actor."""

    def __init__(
        self, env_id: str, password: str, extra_args: Sequence[str],
        tls: tuple[str, str] | None, start_timeout: float,
    ) -> None:
        ray = _ray()
        context = ray.get_runtime_context()
        host = ray.util.get_node_ip_address()
        with warnings.catch_warnings():  # Ray 2.60 reads its own deprecated actor_id inside
            warnings.simplefilter("ignore", DeprecationWarning)
            restarted = bool(context.was_current_actor_reconstructed)
        self._stopping = False
        #: Why the first remote did not start (start_ray reports it, without Ray's traceback).
        self.failure: str | None = None
        try:
            self._group = start_local(
                env_id, 1, password=password, host=host, start_timeout=start_timeout,
                extra_args=serve_args(host, tls, extra_args),
            )
        except Exception as exc:
            if not restarted:
                self.failure = f"on {host}: {exc}"
                return
            print(f"universe-remote: a restarted remote did not start: {exc}", file=sys.stderr, flush=True)
            os._exit(EXIT_REMOTE_DIED)  # Ray tries again while restarts are left
        process = self._group.processes[0]
        self.placement = Placement(
            self._group.addresses[0], context.get_node_id(), process.pid, os.getpid(), restarted
        )
        threading.Thread(
            target=self._watch, args=(process,), name="universe-remote-watch", daemon=True
        ).start()

    def _watch(self, process: subprocess.Popen[bytes]) -> None:
        status = process.wait()
        if self._stopping:
            return
        tail = self._group.logs[0].read_text(errors="replace")[-LOG_TAIL:].strip()
        print(
            f"universe-remote: the remote at {self.placement.address} (pid {process.pid}) "
            f"exited ({status}); ending its actor so that Ray restarts it"
            + (f". The end of its log:\n{tail}" if tail else ""), file=sys.stderr, flush=True,
        )
        os._exit(EXIT_REMOTE_DIED)

    def where(self) -> Placement | str:
        """Where this actor's remote serves, or why it did not start."""
        return self.failure if self.failure is not None else self.placement

    def stop(self) -> None:
        """Stop the remote (SIGTERM, then SIGKILL after a while) without ending the actor."""
        self._stopping = True
        if self.failure is None:
            self._group.close()


class RayRemotes(RemoteGroup):
    """Remotes running as Ray actors; :attr:`address` is their address string as last
    known, :meth:`address_of` where one is now, :attr:`placements` on which node."""

    def __init__(
        self, actors: list[Any], placements: Sequence[Placement], password: str,
        placement_group: Any = None,
    ) -> None:
        """Built by :func:`start_ray`, not by hand.

        Args:
            actors: the Ray actors, one per remote.
            placements: where each remote serves.
            password: the remotes' password.
            placement_group: the ``SPREAD`` placement group, if any (removed on close).
        """
        super().__init__([p.address for p in placements], password)
        self.actors = actors
        self.placements = list(placements)
        self.placement_group = placement_group
        self._asking: list[Any] = [None] * len(actors)
        self._lock = threading.Lock()

    @property
    def nodes(self) -> list[str]:
        """The Ray node id of each remote, as last known."""
        return [p.node_id for p in self.placements]

    def placement_of(self, index: int, timeout: float = ADDRESS_WAIT) -> Placement:
        """Ask actor ``index`` where its remote serves; after ``timeout`` seconds without an
        answer (it is restarting) the last known placement. One question per actor is in
        flight at a time: a later call waits for the same answer.

        Args:
            index: the remote.
            timeout: seconds to wait for the actor's answer.

        Returns:
            Its placement (node and address).
        """
        ray = _ray()
        with self._lock:
            ref = self._asking[index]
            if ref is None:
                ref = self._asking[index] = self.actors[index].where.remote()
        ready, _ = ray.wait([ref], timeout=timeout)
        if not ready:
            return self.placements[index]
        with self._lock:
            if self._asking[index] is ref:
                self._asking[index] = None
        try:
            placement: Placement | str = ray.get(ref)
        except ray.exceptions.RayActorError as exc:  # it died meanwhile: ask its successor next
            log.debug("remote %d: its actor died: %s", index, exc)
            return self.placements[index]
        if isinstance(placement, str):  # only a first start fails this way (start_ray's)
            return self.placements[index]
        with self._lock:
            self.placements[index] = placement
            self.addresses[index] = placement.address
        return placement

    def address_of(self, index: int) -> RemoteAddress:
        """Where remote ``index`` serves now (see :meth:`placement_of`).

        Args:
            index: the remote.

        Returns:
            Its address now.
        """
        return self.placement_of(index).address

    def refresh(self, timeout: float = ADDRESS_WAIT) -> list[Placement]:
        """Ask every actor where its remote serves (concurrently).

        Args:
            timeout: seconds to wait for each actor's answer.

        Returns:
            Every remote's placement, in order (also kept in :attr:`placements`).
        """
        ray = _ray()
        refs = [a.where.remote() for a in self.actors]
        ray.wait(refs, num_returns=len(refs), timeout=timeout)
        return [self.placement_of(i, timeout) for i in range(len(self.actors))]

    def _stop(self) -> None:
        """Stop every remote, kill every actor (no restart) and free the placement group."""
        actors, self.actors = self.actors, []
        group, self.placement_group = self.placement_group, None
        ray = _ray()
        if not ray.is_initialized():  # the driver is gone: Ray ends the actors it owned
            return
        stops = [a.stop.remote() for a in actors]
        if stops:
            ray.wait(stops, num_returns=len(stops), timeout=STOP_TIMEOUT)
        for actor in actors:
            ray.kill(actor, no_restart=True)
        if group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(group)


def _actor_options(resources: Mapping[str, float], max_restarts: int) -> dict[str, Any]:
    options: dict[str, Any] = {"max_restarts": max_restarts, "max_task_retries": 0}
    custom = {}
    for name, amount in resources.items():
        if not (isinstance(amount, int | float) and amount >= 0):
            raise ValueError(f"resources[{name!r}] must be a number >= 0, not {amount!r}")
        if name in _OPTION_NAMES:
            options[_OPTION_NAMES[name]] = amount
        else:
            custom[name] = amount
    options.setdefault("num_cpus", 0)
    if custom:
        options["resources"] = custom
    return options


def start_ray(
    env_id: str = "builtin.Catch-v0",
    n: int = 1,
    *,
    address: str | None = None,
    password: str | None = None,
    tls: tuple[str, str] | None = None,
    resources: Mapping[str, float] | None = None,
    spread: bool = True,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    start_timeout: float = 60.0,
    extra_args: Sequence[str] = (),
    init_timeout: float = INIT_TIMEOUT,
) -> RayRemotes:
    """Start ``n`` remotes of ``env_id`` as Ray actors and wait until each answers.

    Args:
        env_id: what the remotes serve.
        n: how many remotes.
        address: the cluster (``ray.init``'s: ``"auto"``, ``"ray://head:10001"``,
            ``"local"`` for a new local one; None: $RAY_ADDRESS, else the cluster ``ray
            start`` started last, else a new local one); ignored when Ray is already
            initialised.
        password: every remote's (default: a fresh random one, in :attr:`password`).
        tls: (certificate, key) files present on every node: the remotes serve TLS
            (``vnc+tls://``); without it a remote off loopback serves in clear with
            ``--insecure``.
        resources: what each remote reserves (:data:`DEFAULT_RESOURCES`; custom names
            too, ``{"CPU": 0.25, "gpu_node": 1}``).
        spread: one ``SPREAD`` placement group for the remotes (module docstring).
        max_restarts: Ray's, per actor.
        start_timeout: seconds to wait for every remote to answer.
        extra_args: more ``serve`` arguments.
        init_timeout: seconds to wait for Ray to join a cluster whose port answers.

    Returns:
        The running remotes (closing kills the actors).

    Raises:
        RayUnavailable: Ray is not installed, or the cluster does not answer within
            :data:`PROBE_TIMEOUT` (or ``init_timeout``) seconds; the message says what
            to do.
        ValueError: ``n`` out of range.
        UnknownEnvironment: ``env_id`` is not registered.
    """
    if not 1 <= n <= MAX_RAY_REMOTES:
        raise ValueError(f"n must be 1..{MAX_RAY_REMOTES}, not {n}")
    registry.check(env_id)  # before any actor starts
    if max_restarts < -1:
        raise ValueError(f"max_restarts must be -1 (forever) or more, not {max_restarts}")
    bundle = dict(DEFAULT_RESOURCES if resources is None else resources)
    options = _actor_options(bundle, max_restarts)
    ray = _ray()
    if not ray.is_initialized():
        init_ray(ray, address, init_timeout)
    password = password or secrets.token_urlsafe(PASSWORD_CHARS)[:PASSWORD_CHARS]
    group = RayRemotes([], [], password)
    try:
        _place(ray, group, env_id, n, bundle, options, spread, password, tls, start_timeout, extra_args)
    except BaseException:
        group.close()
        raise
    return group


def _place(
    ray: Any, group: RayRemotes, env_id: str, n: int, bundle: dict[str, float],
    options: dict[str, Any], spread: bool, password: str, tls: tuple[str, str] | None,
    start_timeout: float, extra_args: Sequence[str],
) -> None:
    """Reserve room, start the actors and wait for their placements (into ``group``)."""
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    room = f"{n} remote(s) of {bundle} each"
    if spread:
        if not any(bundle.values()):
            raise ValueError("spread=True needs resources= with some amount (a placement group "
                             "cannot reserve nothing); or pass spread=False")
        group.placement_group = placement_group([bundle] * n, strategy="SPREAD")
        ready, _ = ray.wait([group.placement_group.ready()], timeout=start_timeout)
        if not ready:
            raise RayUnavailable(
                f"the cluster has no room for {room} within {start_timeout:g} s (free now: "
                f"{ray.available_resources()}); ask for less with resources=, or add nodes"
            )
    body = ray.remote(RemoteActor)
    for i in range(n):
        strategy = (
            PlacementGroupSchedulingStrategy(group.placement_group, placement_group_bundle_index=i)
            if spread else "DEFAULT"
        )
        group.actors.append(
            body.options(**options, scheduling_strategy=strategy).remote(
                env_id, password, list(extra_args), tls, start_timeout
            )
        )
    group._asking = [None] * n
    refs = [a.where.remote() for a in group.actors]
    ready, _ = ray.wait(refs, num_returns=n, timeout=start_timeout + 10)
    if len(ready) < n:
        raise RayUnavailable(
            f"{n - len(ready)} of {room} did not start within {start_timeout:g} s (free now: "
            f"{ray.available_resources()}); see the actors' logs (ray logs), or pass resources="
        )
    try:
        placements = ray.get(refs)
    except ray.exceptions.RayActorError as exc:
        raise RayUnavailable(f"a remote's actor died as it started: {exc}") from None
    failed = [f"remote {i} {p}" for i, p in enumerate(placements) if isinstance(p, str)]
    if failed:
        raise RayUnavailable(f"{len(failed)} of {n} remotes did not start; {failed[0]}")
    group.placements = list(placements)
    group.addresses = [p.address for p in placements]
