"""The dm_env_rpc port: gRPC ``Environment.Process`` streams on the remote's event loop.

A thin shell: each stream is a :class:`~.session.Session` whose responses go back in
request order. The password (if the remote has one) comes as gRPC metadata
``authorization: Basic base64("<password>:")``, the rewarder's header; wrong ones count
toward the remote's failed-password throttle like on every other port.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from typing import Any, Final

import grpc
from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb, dm_env_rpc_pb2_grpc as pb_grpc

from rewarder.auth import basic_auth_password
from rewarder.server import AuthGuard

from .session import Endpoint, Session
from .world import RemoteLike

log = logging.getLogger(__name__)

#: The port ``serve --dm-env-rpc-port`` suggests and the Docker image uses (15900 + 100).
DEFAULT_PORT: Final = 16000
#: Largest request accepted, and response sent (a 1024x768 RGB frame is 2.4 MB).
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
#: Seconds close() gives open streams to finish.
CLOSE_GRACE: Final = 1.0
#: Streams served at once (one agent joins; the rest may watch properties or wait).
MAX_STREAMS: Final = 16
#: The metadata key carrying the password.
AUTH_METADATA: Final = "authorization"


def peer_host(peer: str) -> str:
    """The address of a gRPC peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``)."""
    _, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0] if rest.count(":") else rest
    return host.strip("[]") or peer


class DmEnvRpcServer:
    """dm_env_rpc for one remote: ``await start(host, port)``, ``await close()``."""

    def __init__(
        self,
        remote: RemoteLike,
        *,
        password: str | None = None,
        auth_guard: AuthGuard | None = None,
        credentials: grpc.ServerCredentials | None = None,
    ) -> None:
        self.endpoint = Endpoint(remote)
        self.password, self.auth_guard, self.credentials = password, auth_guard, credentials
        self.port: int | None = None
        self._server: grpc.aio.Server | None = None

    async def start(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> None:
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),  # a second remote on the same port must fail, not share
        ]
        server = grpc.aio.server(options=options, maximum_concurrent_rpcs=MAX_STREAMS)
        pb_grpc.add_EnvironmentServicer_to_server(_Servicer(self), server)
        address = f"{host}:{port}"
        bound = (
            server.add_secure_port(address, self.credentials) if self.credentials is not None
            else server.add_insecure_port(address)
        )
        if not bound:
            raise OSError(f"cannot bind the dm_env_rpc port {address} (in use?)")
        await server.start()
        self._server, self.port = server, bound

    async def close(self) -> None:
        if self._server is not None:
            await self._server.stop(CLOSE_GRACE)
            self._server = None

    async def check_password(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Abort the stream unless it carries the password (or none is needed)."""
        if self.password is None:
            return
        peer = peer_host(context.peer())
        guard = self.auth_guard
        refusal = guard.refusal(peer) if guard is not None else None
        if refusal is not None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        given = basic_auth_password(metadata.get(AUTH_METADATA))
        if given is None:
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "this remote needs a password: send gRPC metadata "
                "('authorization', 'Basic ' + base64('<password>:'))",
            )
        if not hmac.compare_digest(str(given).encode(), self.password.encode()):
            if guard is not None:
                guard.failed(peer, "the dm_env_rpc port")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong password for this remote")
        if guard is not None:
            guard.succeeded(peer)


class _Servicer(pb_grpc.EnvironmentServicer):  # type: ignore[misc]
    def __init__(self, server: DmEnvRpcServer) -> None:
        self.server = server

    async def Process(  # noqa: N802 - the gRPC method's name
        self,
        requests: AsyncIterator[pb.EnvironmentRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.EnvironmentResponse]:
        await self.server.check_password(context)
        session = Session(self.server.endpoint)
        try:
            async for request in requests:
                yield await session.handle(request)
        finally:
            session.close()
