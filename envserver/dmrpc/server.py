"""The dm_env_rpc port: gRPC ``Environment.Process`` streams on the remote's event loop.

A thin shell: each stream is a :class:`~.session.Session` whose responses go back in
request order. The password (if the remote has one) comes as gRPC metadata
``authorization: Basic base64("<password>:")``, the rewarder's header; wrong ones count
toward the remote's failed-password throttle like on every other port, and a blocked
address is told so, and for how long (``RESOURCE_EXHAUSTED``).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from typing import Any, Final

import grpc
from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb
from dm_env_rpc.v1.extensions import properties_pb2 as props
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, status_pb2

from rewarder.auth import basic_auth_password
from rewarder.lograte import RateLimitedLog
from vncdriver.server import AuthGuard

from ..agent_port import RemoteLike
from .session import Endpoint, Session

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
#: The gRPC service dm_env_rpc defines, and its one method.
SERVICE: Final = "dm_env_rpc.v1.Environment"
#: Elements a tensor in a request may declare (its shape's product). dm_env_rpc broadcasts
#: a one-element tensor to its whole shape (``tensor_utils.reshape_array``: ``np.full``),
#: so a request of a few bytes declaring shape [2**31 - 1] made the remote allocate 2 GB
#: (an RSS spike to 1.6 GB in a 2-minute fuzz); no action or setting comes near this.
MAX_TENSOR_ELEMENTS: Final = 1 << 20


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
        #: What clients send that is refused (and our bugs): one line per kind per
        #: :data:`rewarder.lograte.LOG_INTERVAL`, counted; no traceback for a client's.
        self.bad_input = RateLimitedLog(log)

    async def start(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> None:
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),  # a second remote on the same port must fail, not share
        ]
        server = grpc.aio.server(options=options, maximum_concurrent_rpcs=MAX_STREAMS)
        # Requests arrive as bytes, decoded in :meth:`answer`: one that is no protobuf is
        # answered with an error and the stream goes on (gRPC's own decoding would end the
        # stream and log a traceback at ERROR for each).
        process = grpc.stream_stream_rpc_method_handler(
            _Servicer(self).Process, request_deserializer=None,
            response_serializer=pb.EnvironmentResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Process": process}),)
        )
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
        self.bad_input.close()

    async def answer(self, session: Session, data: bytes, peer: str) -> pb.EnvironmentResponse:
        """The response to one request's bytes: the session's, or an error response
        (the stream goes on) for bytes that are no EnvironmentRequest or for our bug."""
        try:
            request = pb.EnvironmentRequest.FromString(data)
        except DecodeError as exc:
            self.bad_input.log(
                "undecodable request", logging.WARNING,
                "dm_env_rpc: %d bytes from %s are no EnvironmentRequest (%s): answered "
                "INVALID_ARGUMENT", len(data), peer, exc,
            )
            return _error(
                code_pb2.INVALID_ARGUMENT,
                f"the request is not a dm_env_rpc.v1.EnvironmentRequest ({len(data)} bytes: "
                f"{exc}); this port speaks dm_env_rpc v1 (docs/dm_env_rpc.md)",
            )
        if (too_large := oversized_tensor(request)) is not None:
            self.bad_input.log(
                "oversized tensor", logging.WARNING,
                "dm_env_rpc: a request from %s has %s: answered INVALID_ARGUMENT", peer, too_large,
            )
            return _error(code_pb2.INVALID_ARGUMENT, f"{too_large}: a tensor may have at most "
                          f"{MAX_TENSOR_ELEMENTS} elements (MAX_TENSOR_ELEMENTS)")
        try:
            return await session.handle(request)
        except DecodeError as exc:  # bytes inside the request (an extension's Any)
            which = request.WhichOneof("payload")
            self.bad_input.log(
                "undecodable request", logging.WARNING,
                "dm_env_rpc: a %s request from %s holds bytes that decode to nothing (%s): "
                "answered INVALID_ARGUMENT", which, peer, exc,
            )
            return _error(code_pb2.INVALID_ARGUMENT, f"the {which} request holds bytes that are "
                          f"not what it says ({exc})")
        except Exception as exc:  # a bug of ours: answer, log (with a traceback), go on
            which = request.WhichOneof("payload")
            self.bad_input.log(
                f"bug: {which} {type(exc).__name__}", logging.ERROR,
                "dm_env_rpc: handling a %s request from %s failed", which, peer, exc_info=True,
            )
            return _error(
                code_pb2.INTERNAL,
                f"the remote failed to handle this {which} request ({type(exc).__name__}: "
                f"{str(exc)[:200]}); this is a bug in the remote, please report it",
            )

    async def check_password(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Abort the stream unless it carries the password (or none is needed)."""
        if self.password is None:
            return
        peer = peer_host(context.peer())
        guard = self.auth_guard
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        given = basic_auth_password(metadata.get(AUTH_METADATA))
        # Decided as the password is compared: a blocked address hears for how long, and
        # its password (right or wrong) is not compared.
        refusal = guard.admit(peer) if guard is not None else None
        if refusal is not None:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        if given is None:
            if guard is not None:
                guard.abandoned(peer)
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


def oversized_tensor(request: pb.EnvironmentRequest) -> str | None:
    """Which tensor of ``request`` declares more than :data:`MAX_TENSOR_ELEMENTS`
    elements, or None. The shapes are checked before anything unpacks them."""
    which = request.WhichOneof("payload")
    tensors: list[tuple[str, pb.Tensor]] = []
    if which == "step":
        tensors = [(f"action {uid}", t) for uid, t in request.step.actions.items()]
    elif which in ("create_world", "join_world", "reset", "reset_world"):
        settings = getattr(request, which).settings
        tensors = [(f"setting {name[:40]!r}", t) for name, t in settings.items()]
    elif which == "extension" and request.extension.Is(props.PropertyRequest.DESCRIPTOR):
        prop = props.PropertyRequest()
        try:
            request.extension.Unpack(prop)
        except DecodeError:
            return None  # (the session refuses it)
        if prop.WhichOneof("payload") == "write_property":
            tensors = [("property value", prop.write_property.value)]
    for name, tensor in tensors:
        elements = 1
        for dim in tensor.shape:
            elements *= max(dim, 1)
            if elements > MAX_TENSOR_ELEMENTS:
                shape = list(tensor.shape[:4])
                more = ", ..." if len(tensor.shape) > 4 else ""
                return f"{name} of shape {str(shape)[:-1]}{more}] (over {MAX_TENSOR_ELEMENTS} elements)"
    return None


def _error(code: int, message: str) -> pb.EnvironmentResponse:
    return pb.EnvironmentResponse(error=status_pb2.Status(code=code, message=message))


class _Servicer:
    def __init__(self, server: DmEnvRpcServer) -> None:
        self.server = server

    async def Process(  # noqa: N802 - the gRPC method's name
        self,
        requests: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.EnvironmentResponse]:
        # The password is checked once the first request is in: a refusal sent while the
        # client's first write is still in flight reaches it, at times, as gRPC's own
        # INTERNAL "Internal error from Core" instead of our status and reason.
        incoming = aiter(requests)
        try:
            first = await anext(incoming)
        except StopAsyncIteration:
            return
        await self.server.check_password(context)
        session = Session(self.server.endpoint)
        peer = peer_host(context.peer())
        try:
            yield await self.server.answer(session, first, peer)
            async for data in incoming:
                yield await self.server.answer(session, data, peer)
        finally:
            session.close()
