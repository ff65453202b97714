"""The dm_env_rpc port's gRPC shell on bad input, over gRPC on 127.0.0.1 against an
in-process remote: bytes that are no request, tensors that declare billions of elements
and our own bugs are answered with an error and the stream goes on; each kind is one log
line per interval, counted, with no traceback for a client's mistake."""

from __future__ import annotations

import logging
import tracemalloc
from collections.abc import AsyncIterator
from typing import Final

from tests.optional import need_extra

need_extra("dmenv")

import grpc  # noqa: E402
import pytest  # noqa: E402
from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb  # noqa: E402
from dm_env_rpc.v1.extensions import properties_pb2 as props  # noqa: E402
from google.protobuf import any_pb2  # noqa: E402
from google.rpc import code_pb2  # noqa: E402

from envserver.dmrpc.server import MAX_TENSOR_ELEMENTS, DmEnvRpcServer  # noqa: E402
from envserver.dmrpc.session import Session  # noqa: E402
from envserver.remote import Remote  # noqa: E402

TIMEOUT: Final = 10.0
METHOD: Final = "/dm_env_rpc.v1.Environment/Process"


class Stream:
    """One Process stream that sends bytes and reads responses, one at a time."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.call = channel.stream_stream(METHOD)()

    async def ask(self, data: bytes | pb.EnvironmentRequest) -> pb.EnvironmentResponse:
        if isinstance(data, pb.EnvironmentRequest):
            data = data.SerializeToString()
        await self.call.write(data)
        response = await self.call.read()
        assert response is not grpc.aio.EOF, await self.call.details()
        return pb.EnvironmentResponse.FromString(response)


@pytest.fixture
async def port() -> AsyncIterator[DmEnvRpcServer]:
    """The dm_env_rpc port of a lockstep Catch remote (in this process, on this loop)."""
    remote = Remote("builtin.Catch-v0", mode="lockstep")
    await remote.start("127.0.0.1", 0, 0, dm_env_rpc_port=0)
    assert remote.dm_env_rpc is not None
    yield remote.dm_env_rpc
    await remote.close()


@pytest.fixture
async def channel(port: DmEnvRpcServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port.port}") as channel:
        yield channel


def _records(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= level]


async def test_bytes_that_are_no_request_are_answered_and_the_stream_goes_on(
    channel: grpc.aio.Channel,
) -> None:
    stream = Stream(channel)
    response = await stream.ask(b"\xff\xff\xff")
    assert response.error.code == code_pb2.INVALID_ARGUMENT
    assert "not a dm_env_rpc.v1.EnvironmentRequest (3 bytes" in response.error.message
    created = await stream.ask(pb.EnvironmentRequest(create_world=pb.CreateWorldRequest()))
    assert created.create_world.world_name.startswith("builtin.Catch-v0/")
    # Bytes inside a request that decode to nothing (a PropertyRequest's) are the same.
    broken = pb.EnvironmentRequest(extension=any_pb2.Any(
        type_url="type.googleapis.com/" + props.PropertyRequest.DESCRIPTOR.full_name,
        value=b"\x0a\x02\xff\xfe"))  # read_property.key: a string, of bad UTF-8
    response = await stream.ask(broken)
    assert response.error.code == code_pb2.INVALID_ARGUMENT, response
    listed = await stream.ask(pb.EnvironmentRequest(extension=_packed(props.PropertyRequest(
        list_property=props.ListPropertyRequest()))))
    assert listed.WhichOneof("payload") == "extension"
    await stream.call.done_writing()
    assert await stream.call.code() is grpc.StatusCode.OK


def _packed(message: props.PropertyRequest) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


async def test_undecodable_requests_log_one_line_per_interval_and_no_traceback(
    channel: grpc.aio.Channel, port: DmEnvRpcServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    stream = Stream(channel)
    for i in range(50):
        response = await stream.ask(bytes([0xFF, i]))
        assert response.error.code == code_pb2.INVALID_ARGUMENT
    lines = _records(caplog)
    assert [r.name for r in lines] == ["envserver.dmrpc.server"], [r.getMessage() for r in lines]
    assert "are no EnvironmentRequest" in lines[0].getMessage() and lines[0].exc_info is None
    assert port.bad_input.counts == {"undecodable request": 50}
    await stream.call.done_writing()
    await port.close()  # the 49 held back: one more line, counted
    lines = _records(caplog)
    assert len(lines) == 2 and lines[1].getMessage().startswith("undecodable request: 49 more since")


async def test_a_tensor_declaring_two_billion_elements_is_refused_before_it_is_unpacked(
    channel: grpc.aio.Channel,
) -> None:
    stream = Stream(channel)
    created = await stream.ask(pb.EnvironmentRequest(create_world=pb.CreateWorldRequest()))
    world = created.create_world.world_name
    joined = await stream.ask(pb.EnvironmentRequest(join_world=pb.JoinWorldRequest(world_name=world)))
    keys = next(uid for uid, spec in joined.join_world.specs.actions.items() if spec.name == "keys")
    await stream.ask(pb.EnvironmentRequest(step=pb.StepRequest()))  # a sequence's first step
    # Five bytes of payload: dm_env_rpc would broadcast the one value to 2**31 - 1 of them.
    huge = pb.Tensor(uint8s=pb.Tensor.Uint8Array(array=b"\x01"), shape=[2**31 - 1])
    tracemalloc.start()
    try:
        response = await stream.ask(pb.EnvironmentRequest(step=pb.StepRequest(actions={keys: huge})))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.error.code == code_pb2.INVALID_ARGUMENT
    assert f"at most {MAX_TENSOR_ELEMENTS} elements (MAX_TENSOR_ELEMENTS)" in response.error.message
    assert peak < 16 * 1024 * 1024, f"{peak / 1e6:.0f} MB allocated for a refused request"
    # The same bound for settings and property writes; the stream goes on.
    for request in (
        pb.EnvironmentRequest(reset=pb.ResetRequest(settings={"seed": pb.Tensor(
            int64s=pb.Tensor.Int64Array(array=[1]), shape=[1 << 11, 1 << 11])})),
        pb.EnvironmentRequest(extension=_packed(props.PropertyRequest(write_property=props.WritePropertyRequest(
            key="fps", value=pb.Tensor(doubles=pb.Tensor.DoubleArray(array=[30.0]), shape=[-1, 1 << 21]))))),
    ):
        response = await stream.ask(request)
        assert "MAX_TENSOR_ELEMENTS" in response.error.message, response
    stepped = await stream.ask(pb.EnvironmentRequest(step=pb.StepRequest(actions={
        keys: pb.Tensor(uint8s=pb.Tensor.Uint8Array(array=b"\x01\x00"), shape=[2])})))
    assert stepped.step.state == pb.EnvironmentStateType.RUNNING, stepped


async def test_a_bug_of_ours_is_answered_internal_logged_with_its_traceback_and_the_stream_goes_on(
    channel: grpc.aio.Channel, port: DmEnvRpcServer, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO)
    handle = Session.handle

    async def buggy(self: Session, request: pb.EnvironmentRequest) -> pb.EnvironmentResponse:
        if request.WhichOneof("payload") == "destroy_world":
            raise RuntimeError("a bug")
        return await handle(self, request)

    monkeypatch.setattr(Session, "handle", buggy)
    stream = Stream(channel)
    for _ in range(3):
        response = await stream.ask(pb.EnvironmentRequest(destroy_world=pb.DestroyWorldRequest()))
        assert response.error.code == code_pb2.INTERNAL
        assert "(RuntimeError: a bug); this is a bug in the remote" in response.error.message
    created = await stream.ask(pb.EnvironmentRequest(create_world=pb.CreateWorldRequest()))
    assert created.WhichOneof("payload") == "create_world"
    lines = _records(caplog)
    assert len(lines) == 1 and lines[0].levelno == logging.ERROR, [r.getMessage() for r in lines]
    assert lines[0].exc_info is not None  # ours: the traceback, once per interval
    assert port.bad_input.counts == {"bug: destroy_world RuntimeError": 3}
