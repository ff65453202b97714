"""Only the agent that holds the world changes it: a dm_env_rpc stream that never joined may
read properties, but its property writes and ResetWorld are refused (PERMISSION_DENIED,
naming the holder) while another agent plays, over either front end.

Measured before: a stream that never joined took a joined agent's game from 59.9 to 2.0 fps
with one ``fps`` write, and its ``ResetWorld`` switched that game to lockstep.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

from tests.optional import need_extra

need_extra("dmenv")

import grpc  # noqa: E402
import pytest  # noqa: E402
from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb, dm_env_rpc_pb2_grpc as pb_grpc, tensor_utils  # noqa: E402
from dm_env_rpc.v1.extensions import properties_pb2 as props  # noqa: E402
from google.protobuf import any_pb2  # noqa: E402
from google.rpc import code_pb2  # noqa: E402

from envserver.remote import Remote  # noqa: E402
from rewarder.client import RewarderClient  # noqa: E402

WAIT: Final = 10.0


class Stream:
    """One real dm_env_rpc stream (grpc.aio on 127.0.0.1): a request in, its response out."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.call = pb_grpc.EnvironmentStub(channel).Process()

    async def send(self, **payload: Any) -> pb.EnvironmentResponse:
        await self.call.write(pb.EnvironmentRequest(**payload))
        response = await self.call.read()
        assert isinstance(response, pb.EnvironmentResponse), response
        return response

    async def ok(self, **payload: Any) -> pb.EnvironmentResponse:
        response = await self.send(**payload)
        assert not response.HasField("error"), response.error
        return response

    async def property(self, **request: Any) -> pb.EnvironmentResponse:
        packed = any_pb2.Any()
        packed.Pack(props.PropertyRequest(**request))
        return await self.send(extension=packed)

    async def read(self, key: str) -> Any:
        response = await self.property(read_property=props.ReadPropertyRequest(key=key))
        assert not response.HasField("error"), response.error
        unpacked = props.PropertyResponse()
        response.extension.Unpack(unpacked)
        return tensor_utils.unpack_tensor(unpacked.read_property.value)

    async def write(self, key: str, value: Any) -> pb.EnvironmentResponse:
        tensor = tensor_utils.pack_tensor(value)
        return await self.property(write_property=props.WritePropertyRequest(key=key, value=tensor))


@pytest.fixture
async def remote() -> AsyncIterator[Remote]:
    remote = Remote("builtin.Catch-v0")
    await remote.start("127.0.0.1", 0, 0, dm_env_rpc_port=0)
    try:
        yield remote
    finally:
        await remote.close()


@pytest.fixture
async def channel(remote: Remote) -> AsyncIterator[grpc.aio.Channel]:
    assert remote.dm_env_rpc is not None
    async with grpc.aio.insecure_channel(f"127.0.0.1:{remote.dm_env_rpc.port}") as channel:
        yield channel


def refused(response: pb.EnvironmentResponse, holder: str) -> None:
    assert response.error.code == code_pb2.PERMISSION_DENIED, response
    assert holder in response.error.message and "holds this remote" in response.error.message


async def test_a_stream_that_never_joined_reads_but_cannot_change_a_joined_agents_world(
    remote: Remote, channel: grpc.aio.Channel,
) -> None:
    agent, other = Stream(channel), Stream(channel)
    world = (await agent.ok(create_world=pb.CreateWorldRequest(
        settings={"mode": tensor_utils.pack_tensor("realtime")}))).create_world.world_name
    await agent.ok(join_world=pb.JoinWorldRequest(world_name=world))
    first = await agent.ok(step=pb.StepRequest())
    assert first.step.state == pb.EnvironmentStateType.RUNNING
    fps = remote.fps

    assert await other.read("fps") == fps and await other.read("mode") == "realtime"  # reads: fine
    refused(await other.write("fps", 2.0), "the dm_env_rpc agent joined to world")
    refused(await other.write("mode", "lockstep"), "the dm_env_rpc agent joined to world")
    refused(await other.write("frameskip", 7), "the dm_env_rpc agent joined to world")
    refused(await other.send(reset_world=pb.ResetWorldRequest(
        world_name=world, settings={"mode": tensor_utils.pack_tensor("lockstep")})),
        "the dm_env_rpc agent joined to world")
    assert remote.fps == fps and remote.mode == "realtime"
    step = await agent.ok(step=pb.StepRequest())
    assert step.step.state == pb.EnvironmentStateType.RUNNING  # its sequence goes on

    assert not (await agent.write("fps", 30.0)).HasField("error")  # the holder may
    assert remote.fps == 30.0
    await agent.ok(leave_world=pb.LeaveWorldRequest())
    assert not (await other.write("fps", 45.0)).HasField("error")  # nobody holds it now
    assert remote.fps == 45.0


async def test_a_stream_cannot_change_the_remote_under_a_rewarder_agent(
    remote: Remote, channel: grpc.aio.Channel,
) -> None:
    stream = Stream(channel)
    world = (await stream.ok(create_world=pb.CreateWorldRequest())).create_world.world_name
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}", start_timeout=WAIT,
                              calibration_pings=0) as agent:
        assert await agent.reset() > 0
        fps = remote.fps
        assert await stream.read("fps") == fps
        refused(await stream.write("fps", 2.0), "an agent on the rewarder port")
        refused(await stream.send(reset_world=pb.ResetWorldRequest(world_name=world)),
                "an agent on the rewarder port")
        assert remote.fps == fps and remote.rewarder.active is not None
