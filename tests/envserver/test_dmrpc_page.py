"""A browser remote's page structure on the dm_env_rpc port: the ``page`` observation (the
JSON of a ``v0.env.observation`` body), read on request (the page now) and, once the
``observe`` property asks for a page, paired with the frame of each step, in lockstep and
in real time; a click at the box the page gives ends the task with its reward.

A real MiniWoB remote (Chromium on Xvnc, in-process) and dm_env_rpc's own client.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import numpy as np
import pytest

from tests.runtimes.test_browser_remote import (  # noqa: F401 (fixtures)
    TIMEOUT,
    StartMiniWoB,
    _browser_family_installed,
    start_miniwob,
)

pytestmark = [pytest.mark.usefixtures("_browser_family_installed"), pytest.mark.timeout(300)]


@pytest.mark.parametrize("mode", ["lockstep", "realtime"])
async def test_the_page_observation_is_there_on_request_and_describes_the_frame(
    start_miniwob: StartMiniWoB, mode: str  # noqa: F811 (the fixture imported above)
) -> None:
    grpc = pytest.importorskip("grpc", reason="dm_env_rpc needs the dmenv extra")
    from dm_env_rpc.v1 import connection as dm_connection, dm_env_rpc_pb2 as pb, tensor_utils
    from dm_env_rpc.v1.extensions import properties

    remote = await start_miniwob("miniwob.ClickButton-v0", dm_env_rpc_port=0)
    assert remote.dm_env_rpc is not None
    target = f"127.0.0.1:{remote.dm_env_rpc.port}"

    def connect() -> Any:
        channel = grpc.insecure_channel(target)
        grpc.channel_ready_future(channel).result(TIMEOUT)
        return dm_connection.Connection(channel)

    connection = await asyncio.to_thread(connect)
    send = lambda request: asyncio.to_thread(connection.send, request)  # noqa: E731
    try:
        settings = {"mode": mode, "seed": 4}
        world = (await send(pb.CreateWorldRequest(
            settings={k: tensor_utils.pack_tensor(v) for k, v in settings.items()}
        ))).world_name
        specs = (await send(pb.JoinWorldRequest(world_name=world))).specs
        uid = {s.name: u for u, s in specs.observations.items()}
        assert specs.observations[uid["page"]].dtype == pb.DataType.STRING
        actions = {s.name: u for u, s in specs.actions.items()}
        wanted = [uid["page"], uid["frame"], uid["text"], uid["reward"]]

        async def step(**act: Any) -> tuple[int, dict[str, Any], int, str, float]:
            response = await send(pb.StepRequest(
                actions={actions[k]: tensor_utils.pack_tensor(v) for k, v in act.items()},
                requested_observations=wanted,
            ))
            values = {name: tensor_utils.unpack_tensor(response.observations[uid[name]])
                      for name in ("page", "frame", "text", "reward")}
            return (response.state, json.loads(values["page"]), int(values["frame"]),
                    str(values["text"]), float(values["reward"]))

        state, body, frame, _, _ = await step()  # nothing observed yet: the page now
        assert state == pb.EnvironmentStateType.RUNNING
        assert body["page"]["axtree"].startswith("RootWebArea") and body["page"]["elements"]
        await send(pb.ResetRequest())
        await asyncio.to_thread(properties.PropertiesExtension(connection).__setitem__,
                                "observe", "elements,tree")
        state, body, frame, text, _ = await step()  # the sequence's first step
        assert state == pb.EnvironmentStateType.RUNNING
        assert body["frame"] == frame and body["page"]["axtree"].startswith("RootWebArea")
        name = re.findall(r'"([^"]*)"', text)[0]  # the instruction: text
        button = next(e for e in body["page"]["elements"] if e["role"] == "button" and e["name"] == name)
        x, y, w, h = button["bbox"]
        pointer = np.array([int(x + w / 2), int(y + h / 2)], np.int32)
        await step(pointer=pointer, buttons=np.uint8(1))
        state, body, frame, _, total = await step(buttons=np.uint8(0))
        assert body["frame"] == frame or mode == "realtime"
        deadline = time.monotonic() + TIMEOUT
        while state == pb.EnvironmentStateType.RUNNING and time.monotonic() < deadline:
            state, body, frame, _, reward = await step()
            total += reward
            if mode == "lockstep":  # each step's own page: the frame it returns
                assert body["frame"] == frame
        assert state == pb.EnvironmentStateType.TERMINATED and total > 0
        await send(pb.LeaveWorldRequest())
        await send(pb.DestroyWorldRequest(world_name=world))
    finally:
        await asyncio.to_thread(connection.close)
