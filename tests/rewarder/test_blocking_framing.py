"""The blocking rewarder client splits WebSocket frames itself once the handshake is
done: whatever byte boundaries the stream arrives in, every server message is read
whole and in order, pings are answered, fragmented messages are joined, and its own
frames are ones a WebSocket server reads. The peer is websockets' own server protocol
on a real TCP socket, writing the bytes in the chunks each test chooses."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from websockets.frames import Frame, Opcode
from websockets.server import ServerProtocol

from rewarder.blocking import BlockingRewarder
from rewarder.connections import ServerConnection
from rewarder.protocol import StepReply, StepRequest

BODY = {"env_id": "test.Split-v0", "env_state": "running", "fps": 60}


class Peer:
    """The server's end: websockets' sans-I/O server protocol over an accepted socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.ws, self.conn = sock, ServerProtocol(max_size=None), ServerConnection()

    def handshake(self, first: bytes) -> None:
        """Accept the client, then send the handshake response and ``first`` (a text
        message) in one write: the client must cut the frame off the HTTP response."""
        while not (events := self.ws.events_received()):
            self.ws.receive_data(self.sock.recv(65536))
        self.ws.send_response(self.ws.accept(events[0]))
        self.ws.send_text(first)
        self.sock.sendall(b"".join(self.ws.data_to_send()))

    def frames(self) -> list[Frame]:
        """What the client sent since the last look (blocking until something came)."""
        self.ws.receive_data(self.sock.recv(65536))
        return [e for e in self.ws.events_received() if isinstance(e, Frame)]

    def queued(self) -> bytes:
        return b"".join(self.ws.data_to_send())


@pytest.fixture
def pair() -> Iterator[tuple[BlockingRewarder, Peer]]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        peers: list[Peer] = []

        def serve() -> None:
            sock, _ = listener.accept()
            peer = Peer(sock)
            peers.append(peer)
            peer.handshake(peer.conn.describe(0, BODY))

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        rewarder = BlockingRewarder(f"ws://127.0.0.1:{port}", start_timeout=10, calibration_pings=0)
        try:
            rewarder.connect()
            thread.join(10)
            assert rewarder.describe is not None and rewarder.describe.env_id == BODY["env_id"]
            yield rewarder, peers[0]
        finally:
            rewarder.close()
            if peers:
                peers[0].sock.close()


def _dribble(rewarder: BlockingRewarder, peer: Peer, data: bytes, size: int) -> None:
    """``data`` in chunks of ``size`` bytes, the client reading after each."""
    for start in range(0, len(data), size):
        peer.sock.sendall(data[start:start + size])
        rewarder.serve_idle()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_messages_split_anywhere_are_read_whole_and_in_order(
    pair: tuple[BlockingRewarder, Peer], size: int,
) -> None:
    rewarder, peer = pair
    before = rewarder.stats
    peer.ws.send_text(peer.conn.reward(0, 1.0, False, {}))
    peer.ws.send_ping(b"are you there")
    reward = peer.conn.reward(0, 2.0, False, {"pad": "x" * 300})  # a 16-bit length
    peer.ws.send_text(reward[:100], fin=False)  # a fragmented message
    peer.ws.send_continuation(reward[100:], fin=True)
    peer.ws.send_text(peer.conn.describe(1, {**BODY, "pad": "y" * 70_000}))  # a 64-bit length
    _dribble(rewarder, peer, peer.queued(), size)
    rewarder.wait_for_state("running", 1, 10)  # the last message (the keeper may read too)
    after = rewarder.stats
    assert after.rewards - before.rewards == 2
    assert after.messages - before.messages == 3
    assert rewarder.describe is not None and len(rewarder.describe.body["pad"]) == 70_000
    pongs = [f for f in peer.frames() if f.opcode is Opcode.PONG]
    assert [p.data for p in pongs] == [b"are you there"]


def test_its_frames_are_read_by_a_websocket_server_and_replies_come_back(
    pair: tuple[BlockingRewarder, Peer],
) -> None:
    rewarder, peer = pair
    long_action = [("KeyEvent", "Left", True)] * 20  # a request past 125 bytes
    for action in ([], long_action):
        message_id = rewarder.send_step(action, 4, "vnc")
        (frame,) = peer.frames()
        request = peer.conn.receive(frame.data.decode())
        assert isinstance(request, StepRequest) and request.message_id == message_id
        assert len(request.events) == len(action)
        peer.ws.send_text(peer.conn.reply_step(message_id, 0, {"reward": 0.5, "done": False,
                                                                "info": {}, "frame": 7}, 0.001))
        _dribble(rewarder, peer, peer.queued(), 5)
        reply = rewarder.wait_reply(message_id, time.monotonic() + 10)
        assert isinstance(reply, StepReply) and reply.frame == 7 and reply.reward == 0.5


def test_a_close_from_the_server_ends_the_connection(pair: tuple[BlockingRewarder, Peer]) -> None:
    rewarder, peer = pair
    peer.ws.send_close(1001, "going away")
    _dribble(rewarder, peer, peer.queued(), 1)
    peer.sock.shutdown(socket.SHUT_WR)
    with pytest.raises(Exception, match="going away"):
        rewarder.wait_for_state("running", 5, 10)
    assert not rewarder.connected
