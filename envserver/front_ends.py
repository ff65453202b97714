"""The remote's optional front ends, started on request: the browser viewer
(``serve --http-port``), the dm_env_rpc port (``serve --dm-env-rpc-port``), the
OpenEnv port (``serve --openenv-port``) and the MCP port (``serve --mcp-port``).

Each is imported only here, when asked for: a remote that serves none never loads
aiohttp's server or gRPC. Each drives the one :class:`~envserver.remote.Remote` it is
given (never a copy of the game), with its password, throttle and certificate. The
agent front ends (dm_env_rpc, OpenEnv, MCP) each chain their holder into
:attr:`Remote.held_by <envserver.remote.Remote.held_by>`, so the rewarder refuses agents
while one of theirs drives, and each asks :meth:`Remote.agent` (the rewarder's agent, or
another front end's) before it lets one of its own drive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .agent_port import RemoteLike

if TYPE_CHECKING:
    from rewarder.server import RewarderServer
    from rewarder.throttle import AuthThrottle
    from rewarder.tls import ServerTLS
    from vncdriver.server import VNCServer

    from .computer_use.server import MCPServer
    from .dmrpc.server import DmEnvRpcServer
    from .openenv.server import OpenEnvServer
    from .viewer import Viewer


class Hosting(RemoteLike, Protocol):
    """What the front ends use of :class:`envserver.remote.Remote`: what an agent port
    drives, and the servers, secrets and holder chain they share with it (named here so
    the front ends, below the remote, never import it)."""

    #: Who drives now; each agent front end chains its own holder in front.
    held_by: Callable[[], str | None]

    @property
    def vnc_port(self) -> int | None: ...
    @property
    def vnc(self) -> VNCServer: ...
    @property
    def rewarder(self) -> RewarderServer: ...
    @property
    def password(self) -> str | None: ...
    @property
    def view_only_password(self) -> str | None: ...
    @property
    def auth_throttle(self) -> AuthThrottle: ...
    @property
    def tls(self) -> ServerTLS | None: ...


def _either(first: Callable[[], str | None], then: Callable[[], str | None]) -> Callable[[], str | None]:
    """A holder that names ``first``'s agent, else ``then``'s."""
    return lambda: first() or then()


async def start_viewer(remote: Hosting, host: str, port: int) -> Viewer:
    """The browser viewer of ``remote`` on ``port``, attached to its VNC server in-process."""
    from .viewer import Viewer

    assert remote.vnc_port is not None
    viewer = Viewer(
        remote.vnc_port, vnc_host=host, password=remote.password,
        view_only_password=remote.view_only_password,
        describe=lambda: {**remote.describe(), "episode_id": remote.episode_id},
        vnc_server=remote.vnc,
        auth_guard=remote.auth_throttle,
        tls=remote.tls.context if remote.tls else None,
    )
    try:
        await viewer.start(host, port)
    except BaseException:
        await viewer.close("the remote failed to start")
        raise
    return viewer


async def start_dm_env_rpc(remote: Hosting, host: str, port: int) -> DmEnvRpcServer:
    """The dm_env_rpc port of ``remote`` (gRPC with TLS when the remote has a certificate);
    :class:`ValueError` naming the extra to install when gRPC or dm-env-rpc is missing."""
    try:
        import grpc

        from .dmrpc.server import DmEnvRpcServer
    except ModuleNotFoundError as exc:
        raise ValueError(
            f"the dm_env_rpc port needs {exc.name}: pip install 'universe-remote[dmenv]'"
        ) from None
    tls = remote.tls
    server = DmEnvRpcServer(
        remote, password=remote.password, auth_guard=remote.auth_throttle,
        credentials=grpc.ssl_server_credentials([(tls.key_pem, tls.cert_pem)]) if tls else None,
    )
    remote.held_by = _either(server.endpoint.held_by, remote.held_by)
    await server.start(host, port)
    return server


async def start_openenv(remote: Hosting, host: str, port: int) -> OpenEnvServer:
    """The OpenEnv port of ``remote`` on ``port`` (https/wss when the remote has a
    certificate); close it with ``await server.close(reason)`` before the remote."""
    from .openenv.server import OpenEnvServer

    server = OpenEnvServer(
        remote, password=remote.password, auth_guard=remote.auth_throttle,
        tls=remote.tls.context if remote.tls else None,
        allow_origins=remote.rewarder.allow_origins,
        description=getattr(remote.runtime, "description", "") or remote.env_id,
    )
    await server.start(host, port)
    remote.held_by = _either(server.held_by, remote.held_by)
    return server


async def start_mcp(remote: Hosting, host: str, port: int, lease: float | None = None) -> MCPServer:
    """The MCP port of ``remote`` on ``port`` (https when the remote has a certificate),
    its sessions kept ``lease`` s after their host goes (:class:`ValueError`: a bad lease)."""
    from .computer_use.leases import LEASE, check_lease
    from .computer_use.server import MCPServer

    try:
        import PIL  # noqa: F401  (the screenshots: found now, not at an agent's first call)
    except ModuleNotFoundError:
        raise ValueError("the MCP port needs Pillow for its screenshots: pip install "
                         "'universe-remote[mcp]'") from None

    server = MCPServer(
        remote, password=remote.password, auth_guard=remote.auth_throttle,
        tls=remote.tls.context if remote.tls else None,
        allow_origins=remote.rewarder.allow_origins, lease=check_lease(LEASE if lease is None else lease),
    )
    await server.start(host, port)
    remote.held_by = _either(server.held_by, remote.held_by)
    return server
