"""Fuzz the rewarder: random, mutated and broken messages; every request must be answered.

Every message is made so that it needs an answer: actions always carry one bad event
(a valid ``v0.agent.action`` gets no reply, by design). Messages go in batches; each
batch ends with a ping whose reply, on a connection the server handles in order, means
every request before it was answered or never will be. A connection the server closes
(an oversized frame: close code 1009, by design) is reopened and counted.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any, Final

import orjson
import websockets
from websockets.asyncio.client import connect

from rewarder.protocol import CLIENT_ID_HEADER

#: Messages between two checkpoints (pings).
BATCH: Final = 50
#: Seconds a checkpoint may take before it counts as a hang.
CHECKPOINT_TIMEOUT: Final = 10.0
METHODS: Final = ("v0.env.reset", "v0.env.step", "v0.control.ping", "v0.agent.action",
                  "v0.env.describe", "v0.nope", "", "v0.reply.error", "v0.batch.step")
#: The fuzzer's handshake headers: a client id, so that its batch steps drive the game it holds.
HEADERS: Final = {CLIENT_ID_HEADER: "fuzz"}
KEYS: Final = ("Left", "Right", "space", "Up", "a", "NoSuchKey", "", 65361, -1, 2**40)


@dataclass
class Counts:
    messages: int = 0
    requests: int = 0
    answered: int = 0
    unanswered: int = 0
    hangs: int = 0
    crashes: int = 0  # the server stopped answering anyone
    reconnects: int = 0


def _value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON-ish value, nested at most 3 deep."""
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.randint(-2**63, 2**63)
    if kind == 3:
        return rng.choice([rng.random() * 1e9, -0.0, 1e308])
    if kind == 4:
        return "".join(rng.choice("aZ\u00e9\U0001f600\x00\"\\{") for _ in range(rng.randrange(8)))
    if kind == 5:
        return rng.choice(KEYS)
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{rng.randrange(5)}": _value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _event(rng: random.Random) -> list[Any]:
    if rng.random() < 0.5:
        return ["KeyEvent", rng.choice(KEYS), rng.choice([True, False, 1, None])]
    return ["PointerEvent", rng.randint(-5, 300), rng.randint(-5, 300), rng.randint(-1, 300)]


def _batch_body(rng: random.Random) -> dict[str, Any]:
    """A batch step's body: games held and not, bad fields, and an agent's buffer for the
    frames that is (over TCP) never usable, well-formed or not (rewarder/shm_bank.py)."""
    steps = [{"game": rng.choice([0, 0, 1, -1, 70, "0"]), "episode_id": rng.choice(["0", "1", "x", None]),
              "action": [_event(rng) for _ in range(rng.randrange(3))], "frames": rng.choice([1, 4, 0, "4"])}
             for _ in range(rng.randrange(4))]
    body: dict[str, Any] = {"obs": rng.choice(["shm", "shm", "vnc"]), "steps": steps}
    if rng.random() < 0.5:
        rows = rng.choice([1, 2, 8, 0, 5000])
        body["into"] = rng.choice([
            ["universe-remote-frame-bank-1-f", rng.randint(-1, 64), rng.randint(0, 2**40), rows,
             [rng.randrange(-1, 3) for _ in steps]],
            ["universe-remote-frame-bank-1-f", 3, 7, rows, list(range(len(steps)))],
            _value(rng)])
    if rng.random() < 0.1:
        body["memfd"] = _value(rng)
    return body


def message(rng: random.Random, message_id: int) -> tuple[str | bytes, bool]:
    """A message to send and whether it is a request (expects a reply)."""
    roll = rng.random()
    if roll < 0.05:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(64))), True
    if roll < 0.10:
        return '{"method": "v0.control.ping", "headers": {', True  # broken JSON
    if roll < 0.15:
        return orjson.dumps(_value(rng)).decode(), True
    method = rng.choice(METHODS)
    headers: dict[str, Any] = {"message_id": message_id, "sent_at": time.time()}
    if rng.random() < 0.3:
        headers["episode_id"] = rng.choice(["0", "1", "x", 5, None, "99999999999999999999"])
    body: dict[str, Any] = {}
    if method == "v0.agent.action" or method == "v0.env.step":
        body["action"] = [_event(rng) for _ in range(rng.randrange(4))]
    if method == "v0.env.step":
        body["frames"] = rng.choice([1, 2, 4, 0, -1, "4", 20, None])
    if method == "v0.batch.step":
        body.update(_batch_body(rng))
    if method == "v0.env.reset":
        body.update(rng.choice([{}, {"seed": rng.randint(-1, 2**33)}, {"fps": _value(rng)},
                                {"mode": rng.choice(["lockstep", "realtime", "x"])},
                                {"env_id": rng.choice(["builtin.Catch-v0", "nope", 3])}]))
    if rng.random() < 0.2:  # mutate: drop or retype a field
        target = rng.choice([headers, body]) if body else headers
        if target:
            key = rng.choice(sorted(target))
            if rng.random() < 0.5:
                del target[key]
            else:
                target[key] = _value(rng)
    if method == "v0.agent.action" and isinstance(body.get("action"), list):
        body["action"].append(["KeyEvent", "NoSuchKey", True])  # refused: it needs a reply
    data = orjson.dumps({"method": method, "headers": headers, "body": body},
                        option=orjson.OPT_NON_STR_KEYS).decode()
    return data, True


async def run(port: int, count: int, seed: int = 0) -> Counts:
    """Send ``count`` messages to the rewarder at ``port`` (lockstep Catch); the counts."""
    rng = random.Random(seed)
    counts = Counts()
    url = f"ws://127.0.0.1:{port}"
    ws = await connect(url, compression=None, max_size=None,
                       additional_headers=HEADERS)
    await ws.recv()  # describe
    next_id = 10**9  # checkpoint ids, apart from the fuzzed ones
    while counts.messages < count:
        requests = 0
        for _ in range(min(BATCH, count - counts.messages)):
            data, is_request = message(rng, rng.randrange(10**6))
            counts.messages += 1
            requests += is_request
            try:
                await ws.send(data)
            except websockets.ConnectionClosed:
                break
        next_id += 1
        checkpoint = orjson.dumps({"method": "v0.control.ping", "headers": {
            "message_id": next_id, "sent_at": time.time()}, "body": {}}).decode()
        try:
            await ws.send(checkpoint)
            replies = 0
            async with asyncio.timeout(CHECKPOINT_TIMEOUT):
                while True:
                    reply = orjson.loads(await ws.recv())
                    if not reply.get("method", "").startswith("v0.reply."):
                        continue
                    if reply["headers"].get("parent_message_id") == next_id:
                        break
                    replies += 1
        except TimeoutError:
            counts.hangs += 1
            replies = 0
        except websockets.ConnectionClosed:
            counts.reconnects += 1
            ws = await _reopen(url, counts)
            continue
        counts.requests += requests
        counts.answered += replies
        counts.unanswered += max(0, requests - replies)
    await ws.close()
    return counts


async def _reopen(url: str, counts: Counts) -> Any:
    try:
        ws = await connect(url, compression=None, max_size=None, open_timeout=CHECKPOINT_TIMEOUT,
                           additional_headers=HEADERS)
        await ws.recv()
        return ws
    except (OSError, TimeoutError, websockets.InvalidHandshake):
        counts.crashes += 1
        raise
