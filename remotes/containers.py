"""Remotes in Docker containers: the counterpart of :func:`remotes.local.start_local`.

Holds :func:`start_docker`, :class:`DockerRemotes` and :class:`DockerUnavailable`. It
drives the ``docker`` command line (no Python SDK needed), picks free port pairs
5900+i / 15900+i as Universe did, labels its containers, waits until both channels of
each answer, and removes them on close or at exit. Without a Docker engine it fails at
once, saying so.

One container serves one remote unless ``games_per_container`` says more (``serve
--games k`` inside, on 5900+i / 15900+i, each game published on a free pair of its
own): a container is the unit Docker isolates, limits and restarts, so the default keeps
one remote in each, and many small remotes (dozens of Atari or Catch games) share a
container's process and its one wake-up per frame when asked (docs/vnc.md, "What a
real-time frame costs").
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Sequence
from typing import Final

from rewarder import protocol

from .address import RemoteAddress
from .group import RemoteGroup
from .local import probe_remote
from .loop import shared_loop

#: Label on every container we start, so they can be found (and cleaned up) later.
LABEL: Final = "com.universe-remote.managed"
DEFAULT_IMAGE: Final = "universe-remote:latest"
#: First port pair tried; the rewarder port is always the VNC port + 10000.
FIRST_VNC_PORT: Final = 5900
#: Where a container's (first) game serves inside it (the image's EXPOSE).
CONTAINER_VNC_PORT: Final = 5900
CONTAINER_REWARDER_PORT: Final = 15900
#: ``serve --games``' limit, defined once where both sides may import it.
MAX_GAMES_PER_CONTAINER: Final = protocol.MAX_GAMES_PER_PROCESS
#: Port pairs scanned before giving up.
MAX_PORT_SCAN: Final = 1000
#: Seconds a docker CLI call may take.
DOCKER_TIMEOUT: Final = 30.0
#: First wait between probes of a container that does not answer yet, doubling up to the max.
PROBE_BACKOFF: Final = 0.05
MAX_PROBE_BACKOFF: Final = 1.0


class DockerUnavailable(RuntimeError):
    """No usable Docker here; the message says what is missing and what to use instead."""


def _docker(*args: str, timeout: float = DOCKER_TIMEOUT) -> str:
    try:
        result = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise DockerUnavailable(f"`docker {args[0]}` did not answer in {timeout:g} s") from None
    if result.returncode != 0:
        raise DockerUnavailable(
            f"`docker {' '.join(args[:2])}` failed: {result.stderr.strip() or result.stdout.strip()}"
        )
    return result.stdout.strip()


def check_docker() -> str:
    """The Docker engine's version; raises :class:`DockerUnavailable` at once if there is none."""
    if shutil.which("docker") is None:
        raise DockerUnavailable(
            "the docker command is not installed; install Docker, or run remotes without it "
            "with remotes.start_local()"
        )
    try:
        return _docker("info", "--format", "{{.ServerVersion}}", timeout=10)
    except DockerUnavailable as exc:
        raise DockerUnavailable(
            f"no Docker engine answers ({exc}); start dockerd (or set DOCKER_HOST), or run "
            "remotes without Docker with remotes.start_local()"
        ) from None


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pairs(n: int, first: int = FIRST_VNC_PORT) -> list[tuple[int, int]]:
    """The ``n`` lowest free pairs (vnc, vnc + 10000) from ``first`` on."""
    pairs = []
    for vnc in range(first, first + MAX_PORT_SCAN):
        if _port_free(vnc) and _port_free(vnc + 10000):
            pairs.append((vnc, vnc + 10000))
            if len(pairs) == n:
                return pairs
    raise DockerUnavailable(f"fewer than {n} free port pairs in {first}..{first + MAX_PORT_SCAN}")


class DockerRemotes(RemoteGroup):
    """Running remote containers; :attr:`address` is their ``vnc://...`` address string."""

    def __init__(self, containers: list[str], addresses: list[RemoteAddress], password: str) -> None:
        """Built by :func:`start_docker`, not by hand.

        Args:
            containers: the containers' ids.
            addresses: every remote's address, in order.
            password: the remotes' password.
        """
        super().__init__(addresses, password)
        self.containers = containers

    def _stop(self) -> None:
        """Remove the containers (``docker rm -f``)."""
        containers, self.containers = self.containers, []
        if containers:
            subprocess.run(["docker", "rm", "-f", *containers], capture_output=True, check=False)


def docker_run_command(
    image: str, env_id: str, vnc_port: int, rewarder_port: int, args: Sequence[str] = (),
    *, more_games: Sequence[tuple[int, int]] = (),
) -> list[str]:
    """The ``docker run`` line for one remote (the password goes by name, not by value);
    with ``more_games`` (host port pairs) the container serves those games too, game i
    on 5900+i / 15900+i inside (``serve --games``)."""
    publish = []
    for i, (vnc, rewarder) in enumerate([(vnc_port, rewarder_port), *more_games]):
        publish += ["--publish", f"127.0.0.1:{vnc}:{CONTAINER_VNC_PORT + i}",
                    "--publish", f"127.0.0.1:{rewarder}:{CONTAINER_REWARDER_PORT + i}"]
    games = (["--games", str(1 + len(more_games)), "--vnc-port", str(CONTAINER_VNC_PORT),
              "--rewarder-port", str(CONTAINER_REWARDER_PORT)] if more_games else [])
    return [
        "docker", "run", "--detach", "--rm",
        "--label", f"{LABEL}=true",
        "--label", f"com.universe-remote.env_id={env_id}",
        *publish,
        "--env", "UNIVERSE_REMOTE_PASSWORD",
        # --insecure: the ports are published on 127.0.0.1 only (above).
        image, env_id, "--host", "0.0.0.0", "--insecure", *games, *args,
    ]


def start_docker(
    env_id: str = "atari.Pong-v0",
    n: int = 1,
    *,
    image: str = DEFAULT_IMAGE,
    password: str | None = None,
    start_timeout: float = 60.0,
    args: Sequence[str] = (),
    games_per_container: int = 1,
) -> DockerRemotes:
    """Start ``n`` remotes serving ``env_id`` in containers of ``image``; wait until each
    answers.

    Ports are published on 127.0.0.1 only.

    Args:
        env_id: what the remotes serve.
        n: how many remotes.
        image: the image to run.
        password: the remotes' password, or None: a fresh random one (VNC uses 8
            characters). A container listens on all its interfaces, so it always has one.
        start_timeout: seconds to wait for every remote to answer.
        args: more ``serve`` arguments.
        games_per_container: remotes one container serves (``serve --games``; module
            docstring); the last container takes the rest.

    Returns:
        The running containers; closing them removes them.

    Raises:
        DockerUnavailable: no Docker engine, ``docker run`` failed, or not enough free
            ports (the message says what to do).
        ConnectionError: a container did not answer within ``start_timeout`` (see its
            ``docker logs``).
        ValueError: ``games_per_container`` out of range.
    """
    if not 1 <= games_per_container <= MAX_GAMES_PER_CONTAINER:
        raise ValueError(
            f"games_per_container must be 1..{MAX_GAMES_PER_CONTAINER}, not {games_per_container}"
        )
    check_docker()
    password = password or secrets.token_urlsafe(6)[:8]
    containers: list[str] = []
    remotes = DockerRemotes(containers, [], password)
    environment = {"UNIVERSE_REMOTE_PASSWORD": password}
    try:
        pairs = free_port_pairs(n)
        for first in range(0, n, games_per_container):
            (vnc, rewarder), *more = pairs[first : first + games_per_container]
            command = docker_run_command(image, env_id, vnc, rewarder, args, more_games=more)
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=DOCKER_TIMEOUT,
                env={**os.environ, **environment}, check=False,
            )
            if result.returncode != 0:
                raise DockerUnavailable(f"docker run failed: {result.stderr.strip()}")
            containers.append(result.stdout.strip())
            remotes.addresses += [RemoteAddress("127.0.0.1", v, r) for v, r in [(vnc, rewarder), *more]]
        shared_loop().run(
            _probe_all(remotes.addresses, password, start_timeout), start_timeout + 10
        )
    except BaseException:
        remotes.close()
        raise
    return remotes


async def _probe_all(addresses: list[RemoteAddress], password: str, timeout: float) -> None:
    await asyncio.gather(*(_probe_until_up(a, password, timeout) for a in addresses))


async def _probe_until_up(address: RemoteAddress, password: str, timeout: float) -> None:
    """Probe until the container answers: ``docker run`` returns before the remote inside
    listens (later, by the image's start-up), and a published port refuses until then."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = PROBE_BACKOFF
    while True:
        try:
            await probe_remote(address, password, max(0.1, deadline - loop.time()))
            return
        except (OSError, asyncio.IncompleteReadError) as exc:
            if loop.time() + delay > deadline:
                raise ConnectionError(
                    f"container at {address} did not answer within {timeout:g} s: {exc}; "
                    "see `docker logs` of the container"
                ) from exc
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_PROBE_BACKOFF)
