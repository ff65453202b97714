"""The FRAME_TAG pseudo-encoding: frames that know their number, episode and time."""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from rewarder.client import RewarderClient
from tests.conftest import StartRemote
from tests.vncdriver.helpers import make_frame, protocol_pair
from vncdriver.client import VNCClient
from vncdriver.client_protocol import FramebufferUpdated
from vncdriver.messages import Encoding, FrameTag, RectangleHeader, build_encodings

TAGGED = build_encodings(pseudo=(Encoding.DESKTOP_SIZE, Encoding.LAST_RECT, Encoding.FRAME_TAG))


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.floats(0, 4e9))
def test_tag_round_trip(frame: int, episode: int, timestamp: float) -> None:
    tag = FrameTag(frame, episode, timestamp)
    data = tag.serialize()
    header = RectangleHeader.parse(data[:12])
    assert header.encoding == Encoding.FRAME_TAG
    assert FrameTag.parse(data[12:]) == tag


def updates(client) -> list[FramebufferUpdated]:  # type: ignore[no-untyped-def]
    return [e for e in client.events_received() if isinstance(e, FramebufferUpdated)]


def test_a_new_tag_is_sent_even_when_no_pixel_changed() -> None:
    client, server = protocol_pair(64, 48, client_kwargs={"encodings": TAGGED})
    frame = make_frame(48, 64, "noise", 1)
    server.set_frame_tag(FrameTag(1, 1, 10.0))
    client.request_update()
    server.receive_data(client.data_to_send())
    assert server.send_update(frame) >= 2  # the tag and the pixels
    client.receive_data(server.data_to_send())
    (first,) = updates(client)
    assert first.tag == FrameTag(1, 1, 10.0) and client.frame_tag == first.tag
    assert np.array_equal(client.framebuffer, frame)
    client.request_update()
    server.receive_data(client.data_to_send())
    assert not server.update_wanted  # same frame, same tag: nothing to say
    server.set_frame_tag(FrameTag(2, 1, 10.5))
    assert server.update_wanted
    assert server.send_update(frame) == 1  # only the tag
    client.receive_data(server.data_to_send())
    (second,) = updates(client)
    assert second.tag == FrameTag(2, 1, 10.5) and second.npixels == 0


def test_ordinary_viewers_never_see_it() -> None:
    client, server = protocol_pair(64, 48)  # default encodings: no FRAME_TAG
    server.set_frame_tag(FrameTag(5, 2, 1.0))
    client.request_update()
    server.receive_data(client.data_to_send())
    server.send_update(make_frame(48, 64, "noise", 2))
    data = server.data_to_send()
    assert (Encoding.FRAME_TAG & 0xFFFFFFFF).to_bytes(4, "big") not in data
    client.receive_data(data)
    (update,) = updates(client)
    assert update.tag is None
    server.set_frame_tag(FrameTag(6, 2, 1.1))
    client.request_update()
    server.receive_data(client.data_to_send())
    assert not server.update_wanted


async def test_lockstep_frame_n_arrives_tagged_and_exact(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    async with (
        RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as rewarder,
        VNCClient(f"127.0.0.1::{remote.vnc_port}", frame_tags=True) as vnc,
    ):
        episode = await rewarder.reset(seed=4)
        for frames in (1, 3, 7):
            reply = await rewarder.step([("KeyEvent", "Right", True)], frames=frames)
            tag = await vnc.wait_frame(reply.frame, timeout=10)
            assert (tag.frame, tag.episode_id) == (reply.frame, episode)
            assert np.array_equal(vnc.framebuffer, remote.runtime.framebuffer)
        for _ in range(30):  # every single-frame step's frame arrives, named
            reply = await rewarder.step([], frames=1)
            assert (await vnc.wait_frame(reply.frame, timeout=10)).frame == reply.frame


async def test_rewards_name_their_frame(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as rewarder:
        await rewarder.reset(seed=1)
        while not (reply := await rewarder.step([], frames=50)).reward:
            pass
        assert reply.info["remote.frame"] == reply.frame == remote.frame

