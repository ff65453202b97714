"""Action-to-pixel latency on Catch, shared by :mod:`benchmarks.remotes_realtime` and
:mod:`benchmarks.density`: tap Right, then Left, on real-time Catch remotes over VNC, and
time each send to the update that shows the paddle moved.

Holds :func:`paddle_x` and :func:`tap_latencies`. Each tap waits a random 2-4 frame
periods first, so sends fall at random phases of the remote's frame clock; a tap whose
paddle moved otherwise (an episode reset, a wall) is discarded, not counted.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import Final

import numpy as np

from runtimes.builtin import CATCH_PADDLE_COLOUR, CATCH_PADDLE_SPEED, CATCH_PADDLE_Y
from vncdriver.client import VNCClient

#: Seconds a tap's update may take before the run fails (a stalled remote, not a sample).
LATENCY_TIMEOUT: Final = 2.0
#: Seconds a client waits for its first full frame.
FIRST_FRAME_TIMEOUT: Final = 10.0
_PADDLE_RGB: Final = np.array(CATCH_PADDLE_COLOUR, np.uint8)


def paddle_x(framebuffer: np.ndarray) -> int | None:
    """The left edge of Catch's paddle in ``framebuffer``, or None when it is not drawn."""
    row = framebuffer[CATCH_PADDLE_Y + 1]
    hits = np.flatnonzero((row == _PADDLE_RGB).all(axis=1))
    return int(hits[0]) if hits.size else None


async def tap_latencies(
    ports: Sequence[int], samples: int, warmup: int, period: float
) -> tuple[list[float], list[int], int]:
    """Tap the remotes on VNC ``ports`` in turn until ``samples`` are timed (the first
    ``warmup`` taps are not): seconds from each send to the update showing the move,
    which remote each sample came from, and how many taps were discarded. ``period``:
    the remotes' frame period."""
    clients = [VNCClient(f"127.0.0.1::{port}") for port in ports]
    rng = random.Random(0)
    timings: list[float] = []
    whose: list[int] = []
    discarded = tap = 0
    try:
        for client in clients:
            await client.start()
            await client.wait_update(0, timeout=FIRST_FRAME_TIMEOUT)
        while len(timings) < samples:
            await asyncio.sleep(rng.uniform(2 * period, 4 * period))  # a random phase
            which = tap % len(clients)
            client = clients[which]
            key, step = ("Right", 1) if (tap // len(clients)) % 2 == 0 else ("Left", -1)
            tap += 1
            before = paddle_x(client.framebuffer)
            if before is None:
                continue
            after = client.updates
            sent = time.perf_counter()
            client.send_events([("KeyEvent", key, True), ("KeyEvent", key, False)])
            while True:
                after = await client.wait_update(after, timeout=LATENCY_TIMEOUT)
                seen = time.perf_counter()
                x = paddle_x(client.framebuffer)
                if x != before:
                    break
                if seen - sent > LATENCY_TIMEOUT:
                    raise TimeoutError(f"a {key} tap did not move the paddle within {LATENCY_TIMEOUT} s")
            if x != before + step * CATCH_PADDLE_SPEED:
                discarded += 1  # an episode reset moved it (or a wall stopped it): no sample
            elif tap > warmup:
                timings.append(seen - sent)
                whose.append(which)
    finally:
        for client in clients:
            await client.close()
    return timings, whose, discarded
