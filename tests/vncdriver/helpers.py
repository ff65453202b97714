"""Helpers for the VNC codec tests: in-memory handshakes, protocol pairs, test frames."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from vncdriver.client_protocol import ClientProtocol
from vncdriver.handshake import ClientHandshake, ServerHandshake
from vncdriver.server_protocol import ServerProtocol


def run_handshake(
    client: ClientHandshake, server: ServerHandshake, chunk: int | None = None
) -> tuple[ClientHandshake, ServerHandshake]:
    """Move bytes both ways until both sides complete (errors propagate)."""
    for _ in range(20):
        moved = False
        for src, dst in ((server, client), (client, server)):
            data = src.data_to_send()
            if data:
                moved = True
                feed(dst, data, chunk)
        if client.complete and server.complete:
            return client, server
        if not moved:
            break
    raise AssertionError("handshake stalled")


def feed(receiver: Any, data: bytes, chunk: int | Iterable[int] | None = None) -> None:
    """receive_data in pieces: all at once, fixed size, or sizes from an iterable (cycled)."""
    if chunk is None:
        receiver.receive_data(data)
        return
    sizes = [chunk] if isinstance(chunk, int) else list(chunk)
    pos, i = 0, 0
    while pos < len(data):
        n = max(1, sizes[i % len(sizes)])
        receiver.receive_data(data[pos : pos + n])
        pos += n
        i += 1


def protocol_pair(
    width: int = 96,
    height: int = 80,
    *,
    client_kwargs: dict | None = None,
    server_kwargs: dict | None = None,
) -> tuple[ClientProtocol, ServerProtocol]:
    """A handshaken client and server protocol, with the client's setup messages delivered."""
    c, s = run_handshake(ClientHandshake(), ServerHandshake(width, height, "test"))
    assert c.result is not None and s.result is not None
    client = ClientProtocol(c.result, **(client_kwargs or {}))
    server = ServerProtocol(s.result, **(server_kwargs or {}))
    server.receive_data(client.data_to_send())
    server.events_received()
    return client, server


def make_frame(h: int, w: int, kind: str, seed: int) -> np.ndarray:
    """Frames the encoders treat differently: solid, few colours, noise, mixed, gradient."""
    rng = np.random.default_rng(seed)
    if kind == "solid":
        return np.broadcast_to(rng.integers(0, 256, 3, dtype=np.uint8), (h, w, 3)).copy()
    if kind.startswith("few"):
        n = int(kind[3:] or 4)
        palette = rng.integers(0, 256, (n, 3), dtype=np.uint8)
        # Blocky content: runs, like screens.
        idx = rng.integers(0, n, (h, -(-w // 5)))
        return palette[np.repeat(idx, 5, axis=1)[:, :w]]
    if kind == "noise":
        return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    if kind == "smooth":
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 3, yy * 2, xx + yy], -1) + rng.integers(0, 50, 3)
        return (base % 256).astype(np.uint8)
    if kind == "mixed":
        frame = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        frame[: h // 2] = rng.integers(0, 256, 3, dtype=np.uint8)
        frame[h // 2 :, : w // 2] = make_frame(h - h // 2, w // 2, "few3", seed + 1)
        return frame
    raise ValueError(kind)
