"""Rewarder messages per second, both ways, against websockets + stdlib json.

Ours: :class:`rewarder.server.RewarderServer` broadcasting ``v0.env.reward`` to a
:class:`rewarder.client.RewarderClient` that parses and files every message into its
reward buffer; and the client sending ``v0.agent.action`` to the server, which parses,
validates and hands each to the handler. Baseline: a bare websockets server and client
exchanging the same envelopes with ``json.dumps``/``json.loads`` and no protocol logic.
Both run on 127.0.0.1 in one event loop, so the ratio compares the same conditions.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import serve as ws_serve

from benchmarks.common import quick
from rewarder.client import RewarderClient
from rewarder.server import RewarderServer

#: Messages per measured run; bounded so a run takes about a second.
MESSAGES = quick(40_000, 10_000)
#: Seconds a run may take before it is reported as failed (a dropped connection, say)
#: instead of waiting for ever.
RUN_LIMIT = 60.0
#: Messages sent between two turns of the loop, so the connection's pings are answered
#: (the remote drops a client that leaves one unanswered for 1.5 s).
YIELD_EVERY = 256
ROUNDS = quick(3, 1)
#: Bytes buffered for the client above which the broadcasting waits for the socket to
#: drain (about the 512 messages the old per-client queue was let hold): far under the
#: server's MAX_BUFFERED_BYTES, which drops a client, and shallow enough that the
#: server's keepalive ping, queued behind them, is answered within KEEPALIVE_TIMEOUT.
DRAIN_ABOVE = 64 * 1024
ACTION = [["KeyEvent", "Left", True], ["PointerEvent", 10, 20, 1]]
INFO = {"score": 3, "stats.frames": 1}


class _Handler:
    episode_id = 1

    def __init__(self) -> None:
        self.actions = 0
        self.got_all = asyncio.Event()

    def describe(self) -> dict[str, Any]:
        return {"env_id": "bench.Stub-v0", "env_state": "running", "fps": 60}

    async def reset(self, request: Any, reply: Any) -> None:
        reply(self.episode_id)

    def action(self, request: Any) -> None:
        self.actions += 1
        if self.actions == MESSAGES:
            self.got_all.set()

    def client_left(self, observer: bool) -> None:
        pass


async def ours() -> tuple[float, float]:
    handler = _Handler()
    server = RewarderServer(handler)
    await server.start("127.0.0.1", 0)
    client = RewarderClient(f"127.0.0.1:{server.port}")
    await client.start()
    await client.reset()
    (remote,) = server.clients
    # server -> client
    base = client.stats.rewards
    started = time.perf_counter()
    for i in range(MESSAGES):
        server.broadcast_reward(1, 1.0, False, INFO)
        if remote.buffered() > DRAIN_ABOVE:  # let the socket drain: the bench must not overflow
            while remote.buffered() > DRAIN_ABOVE // 8:
                await asyncio.sleep(0)
        elif i % YIELD_EVERY == 0:
            await asyncio.sleep(0)
    while client.stats.rewards - base < MESSAGES:
        if not client.connected:
            raise RuntimeError(f"the client's connection dropped: {client.error}")
        await asyncio.sleep(0.0005)
    down = MESSAGES / (time.perf_counter() - started)
    assert client.pop().reward >= MESSAGES
    # client -> server
    started = time.perf_counter()
    for _ in range(MESSAGES):
        await client.send_action(ACTION)
    await handler.got_all.wait()
    up = MESSAGES / (time.perf_counter() - started)
    await client.close()
    await server.close()
    return down, up


def _envelope(method: str, message_id: int, body: dict[str, Any], **headers: Any) -> str:
    headers.update(message_id=message_id, sent_at=time.time())
    return json.dumps({"method": method, "headers": headers, "body": body})


async def baseline() -> tuple[float, float]:
    received = 0
    got_all = asyncio.Event()

    async def handler(ws: Any) -> None:
        nonlocal received
        for i in range(MESSAGES):
            await ws.send(
                _envelope("v0.env.reward", i, {"reward": 1.0, "done": False, "info": INFO},
                          episode_id="1")
            )
        async for data in ws:
            json.loads(data)
            received += 1
            if received == MESSAGES:
                got_all.set()

    async with ws_serve(handler, "127.0.0.1", 0, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        async with ws_connect(f"ws://127.0.0.1:{port}", compression=None) as ws:
            started = time.perf_counter()
            for _ in range(MESSAGES):
                json.loads(await ws.recv())
            down = MESSAGES / (time.perf_counter() - started)
            started = time.perf_counter()
            for i in range(MESSAGES):
                await ws.send(_envelope("v0.agent.action", i, {"action": ACTION}))
            await got_all.wait()
            up = MESSAGES / (time.perf_counter() - started)
    return down, up


async def _bounded(run: Any) -> tuple[float, float]:
    try:
        return await asyncio.wait_for(run, RUN_LIMIT)  # type: ignore[no-any-return]
    except TimeoutError:
        raise RuntimeError(f"a run took over {RUN_LIMIT:g} s (a dropped connection?)") from None


def main() -> None:
    results: dict[str, list[tuple[float, float]]] = {"ours": [], "baseline": []}
    for _ in range(ROUNDS):
        results["baseline"].append(asyncio.run(_bounded(baseline())))
        results["ours"].append(asyncio.run(_bounded(ours())))
    best = {name: (max(r[0] for r in runs), max(r[1] for r in runs)) for name, runs in results.items()}
    print(f"  {MESSAGES} messages each way, best of {ROUNDS}, one event loop, 127.0.0.1")
    print(f"  {'':34}{'server->client':>16}{'client->server':>16}")
    labels = (("baseline", "websockets + json (no protocol)"), ("ours", "universe-remote rewarder"))
    for name, label in labels:
        down, up = best[name]
        print(f"  {label:34}{down:>12,.0f} /s {up:>12,.0f} /s")
    down = best["ours"][0] / best["baseline"][0]
    up = best["ours"][1] / best["baseline"][1]
    print(f"  {'ratio ours / baseline':34}{down:>13.2f}x {up:>14.2f}x")


if __name__ == "__main__":
    main()
