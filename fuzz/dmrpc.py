"""Fuzz the dm_env_rpc port: valid, mutated and broken requests on gRPC streams; every
request must be answered.

dm_env_rpc answers each request of a stream with one response, in order, errors included
(a ``google.rpc.Status`` that leaves the stream open), so a request is *answered* when
its response comes back, and *unanswered* when the stream ends (or the batch's deadline
passes) before it did. Requests are serialized here, so the fuzzer sends what no
well-behaved client would: bytes that are no protobuf, valid protobufs of nonsense
(unknown worlds, tensors of every type and shape, properties of the wrong type, unknown
extensions), byte flips and truncations of valid requests, and empty messages. Several
streams run at once (a remote takes up to ``MAX_STREAMS``): they race for the one world
and its one agent. A stream is closed and a new one opened every few batches.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb
from dm_env_rpc.v1.extensions import properties_pb2 as props
from google.protobuf import any_pb2, message
from google.rpc import code_pb2

#: Requests between two checks that every one was answered.
BATCH: Final = 50
#: Batches a stream carries before it is closed and another opened.
BATCHES_PER_STREAM: Final = 20
#: Streams fuzzed at once.
STREAMS: Final = 4
#: Seconds a stream may go without a response while requests wait before it counts as
#: a hang: well above the remote's own deadline for a real-time step's frame (10 s), since
#: the fuzz may slow the remote to 1 fps.
RESPONSE_TIMEOUT: Final = 30.0
#: Share of messages over the port's limit (MAX_MESSAGE_BYTES, 16 MiB): gRPC ends their
#: stream with RESOURCE_EXHAUSTED, by design, and the requests after one go unanswered.
OVERSIZED_SHARE: Final = 1 / 25_000
OVERSIZED_BYTES: Final = 16 * 1024 * 1024 + 1
_METHOD: Final = "/dm_env_rpc.v1.Environment/Process"
_SETTINGS: Final = ("env_id", "seed", "mode", "frameskip", "player", "nope", "")
_PROPERTIES: Final = ("env_id", "fps", "mode", "frameskip", "seed", "width", "height",
                      "episode_id", "frame", "version", "protocols", "nope", "")
_STRINGS: Final = ("lockstep", "realtime", "builtin.Catch-v0", "nope", "", "\x00\u00e9",
                   "builtin.Catch-v0/1")


@dataclass
class Counts:
    messages: int = 0
    requests: int = 0
    answered: int = 0
    unanswered: int = 0
    hangs: int = 0
    crashes: int = 0  # the port stopped taking streams
    streams: int = 0
    #: Streams gRPC ended for a message over the limit (the requests from it on are not
    #: counted as requests: nothing answers them, by design).
    closed_oversized: int = 0
    #: Responses by what they carried: a payload's name, or ``error:<code name>``.
    responses: Counter[str] = field(default_factory=Counter)
    #: Streams the server ended, by gRPC status (OK: we closed our side and it finished).
    stream_ends: Counter[str] = field(default_factory=Counter)
    #: Why streams the server ended early ended (status and details).
    stream_end_details: Counter[str] = field(default_factory=Counter)


def _tensor(rng: random.Random) -> pb.Tensor:
    """A tensor of any payload type, with a shape that fits it or does not."""
    tensor = pb.Tensor()
    kind = rng.choice(("floats", "doubles", "int8s", "int32s", "int64s", "uint8s", "uint32s",
                       "uint64s", "bools", "strings", "protos", None))
    n = rng.choice((0, 1, 1, 1, 2, 3, 7))
    if kind in ("floats", "doubles"):
        getattr(tensor, kind).array.extend(
            rng.choice((0.0, -1.0, 1e308 if kind == "doubles" else 3e38, float("nan"), rng.random()))
            for _ in range(n))
    elif kind in ("int8s", "uint8s"):
        getattr(tensor, kind).array = bytes(rng.randrange(256) for _ in range(n))
    elif kind in ("int32s", "int64s"):
        bits = 31 if kind == "int32s" else 63
        getattr(tensor, kind).array.extend(
            rng.choice((0, 1, 2, -1, 4, 2**bits - 1, -(2**bits), rng.randrange(-5, 300)))
            for _ in range(n))
    elif kind in ("uint32s", "uint64s"):
        bits = 32 if kind == "uint32s" else 64
        getattr(tensor, kind).array.extend(rng.choice((0, 1, 2, 2**bits - 1)) for _ in range(n))
    elif kind == "bools":
        tensor.bools.array.extend(rng.random() < 0.5 for _ in range(n))
    elif kind == "strings":
        tensor.strings.array.extend(rng.choice(_STRINGS) for _ in range(n))
    elif kind == "protos":
        tensor.protos.array.extend(any_pb2.Any(type_url="x/y", value=b"\x08\x01") for _ in range(n))
    shape = rng.random()
    if shape < 0.2:
        tensor.shape.extend(rng.choice((n, -1, 0, 2**31 - 1, -2)) for _ in range(rng.randrange(1, 4)))
    elif shape < 0.3:
        tensor.shape.append(n)
    return tensor


_PAYLOADS: Final = {pb.FLOAT: "floats", pb.DOUBLE: "doubles", pb.INT8: "int8s", pb.INT32: "int32s",
                    pb.INT64: "int64s", pb.UINT8: "uint8s", pb.UINT32: "uint32s",
                    pb.UINT64: "uint64s", pb.BOOL: "bools"}


def _action(rng: random.Random, spec: pb.TensorSpec) -> pb.Tensor:
    """An action as its spec asks (small values: mostly within bounds), or a single value."""
    kind = _PAYLOADS.get(spec.dtype, "int32s")
    shape = [d if d > 0 else 1 for d in spec.shape] if rng.random() < 0.8 else []
    n = 1
    for d in shape:
        n *= d
    values = [rng.choice((0, 1, 1, 2, 5, 300)) for _ in range(n)]
    tensor = pb.Tensor(shape=shape)
    if kind in ("int8s", "uint8s"):
        getattr(tensor, kind).array = bytes(v % 256 for v in values)
    elif kind == "bools":
        tensor.bools.array.extend(bool(v) for v in values)
    else:
        getattr(tensor, kind).array.extend(values)
    return tensor


def _settings(rng: random.Random, target: Any) -> None:
    for _ in range(rng.choice((0, 0, 1, 1, 2, 4))):
        name = rng.choice(_SETTINGS)
        if rng.random() < 0.4:
            value = _tensor(rng)
        elif name in ("env_id", "mode"):  # a plausible value of the right type
            strings = _STRINGS if name == "env_id" else _STRINGS[:3]
            value = pb.Tensor(strings=pb.Tensor.StringArray(array=[rng.choice(strings)]))
        else:
            value = pb.Tensor(int64s=pb.Tensor.Int64Array(
                array=[rng.choice((0, 1, 2, 4, -1, 10**6, 2**63 - 1))]))
        target[name].CopyFrom(value)


class _Stream:
    """What one stream learned (the world's name is every stream's): whether it has
    joined, the action and observation uids."""

    def __init__(self, rng: random.Random, world: list[str]) -> None:
        self.world = world
        self.joined = False
        #: Another stream's agent holds the world: join less often.
        self.blocked = False
        self.actions: dict[int, pb.TensorSpec] = {1: pb.TensorSpec(dtype=pb.UINT8, shape=[2])}
        self.observations: list[int] = [1, 2, 3]
        #: Requests to send first (most streams begin as an agent would: create, join).
        self.script: list[str] = ["create_world", "join_world"] if rng.random() < 0.7 else []

    def learn(self, response: pb.EnvironmentResponse) -> None:
        which = response.WhichOneof("payload")
        if which == "create_world":
            self.world[0] = response.create_world.world_name
        elif which == "error" and "its world is '" in response.error.message:
            self.world[0] = response.error.message.split("its world is '", 1)[1].split("'", 1)[0]
        elif which == "error" and "needs a joined world" in response.error.message:
            self.joined = False
        elif which == "error" and "another agent has joined" in response.error.message:
            self.joined, self.blocked = False, True
        elif which == "leave_world":
            self.joined = False
        if which in ("join_world", "reset"):
            self.joined = True
            specs = getattr(response, which).specs
            self.actions = dict(specs.actions) or self.actions
            self.observations = list(specs.observations) or self.observations


def request(rng: random.Random, stream: _Stream) -> pb.EnvironmentRequest:
    """A well-formed EnvironmentRequest with random contents."""
    req = pb.EnvironmentRequest()
    if stream.script:  # as an agent begins: a world of the remote as it runs, joined
        kind = stream.script.pop(0)
        if kind == "create_world":
            req.create_world.SetInParent()
        else:
            req.join_world.world_name = stream.world[0]
        return req
    if not stream.joined and rng.random() < (0.05 if stream.blocked else 0.5):
        stream.blocked = False  # (asks again; most requests need a joined world)
        req.join_world.world_name = stream.world[0]
        return req
    world = stream.world[0] if rng.random() < 0.8 else rng.choice(("", "nope", "\u00e9" * 3))
    joined = stream.joined  # then mostly steps, and rarely leave
    kind = rng.choices(("create_world", "join_world", "step", "reset", "reset_world",
                        "leave_world", "destroy_world", "extension", "none"),
                       weights=(3, 3, 65 if joined else 5, 5, 3, 0.2 if joined else 2, 2, 15, 2))[0]
    if kind == "create_world":
        _settings(rng, req.create_world.settings)
    elif kind == "join_world":
        req.join_world.world_name = world
        _settings(rng, req.join_world.settings)
    elif kind == "step":
        for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
            uid = rng.choice(sorted(stream.actions)) if rng.random() < 0.9 else rng.choice((0, 99, 2**64 - 1))
            spec = stream.actions.get(uid)
            valid = spec is not None and rng.random() < 0.7
            req.step.actions[uid].CopyFrom(_action(rng, spec) if valid and spec else _tensor(rng))
        for _ in range(rng.choice((0, 1, 2, 3))):
            req.step.requested_observations.append(
                rng.choice(stream.observations) if rng.random() < 0.8 else rng.randrange(0, 2**32 - 1))
    elif kind == "reset":
        _settings(rng, req.reset.settings)
    elif kind == "reset_world":
        req.reset_world.world_name = world
        _settings(rng, req.reset_world.settings)
    elif kind == "leave_world":
        req.leave_world.SetInParent()
    elif kind == "destroy_world":
        req.destroy_world.world_name = world
    elif kind == "extension":
        prop = props.PropertyRequest()
        roll = rng.random()
        key = rng.choice(_PROPERTIES)
        if roll < 0.4:
            prop.read_property.key = key
        elif roll < 0.6:
            prop.list_property.key = rng.choice(("", key))
        elif roll < 0.9:
            prop.write_property.key = key
            prop.write_property.value.CopyFrom(_tensor(rng))
        if rng.random() < 0.9:
            req.extension.Pack(prop)
        else:
            req.extension.CopyFrom(any_pb2.Any(type_url=rng.choice(("", "type.googleapis.com/x.Y")),
                                               value=bytes(rng.randrange(256) for _ in range(5))))
    return req


def message_bytes(rng: random.Random, stream: _Stream) -> bytes:
    """One message as sent: a valid request, a mutated one, garbage, nothing, or (rarely)
    one over the port's limit."""
    roll = rng.random()
    if roll < OVERSIZED_SHARE:
        return bytes(OVERSIZED_BYTES)
    if roll < 0.05:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if roll < 0.07:
        return b""
    data = bytearray(request(rng, stream).SerializeToString())
    if roll < 0.20 and data:  # flip, cut or extend
        action = rng.randrange(3)
        if action == 0:
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif action == 1:
            del data[rng.randrange(len(data)):]
        else:
            data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
    return bytes(data)


def _describe(response: bytes) -> tuple[str, pb.EnvironmentResponse | None]:
    try:
        parsed = pb.EnvironmentResponse.FromString(response)
    except message.DecodeError:
        return "undecodable response", None
    which = parsed.WhichOneof("payload") or "empty"
    if which == "error":
        return f"error:{code_pb2.Code.Name(parsed.error.code)}", parsed
    return which, parsed


async def _stream(channel: grpc.aio.Channel, rng: random.Random, counts: Counts,
                  budget: list[int], world: list[str]) -> None:
    """One stream: batches until :data:`BATCHES_PER_STREAM` or the budget is spent."""
    call = channel.stream_stream(_METHOD)()  # bytes in, bytes out
    counts.streams += 1
    stream = _Stream(rng, world)
    ended = False
    try:
        for _ in range(BATCHES_PER_STREAM):
            size = min(BATCH, budget[0])
            if size <= 0:
                break
            budget[0] -= size
            got = [0]

            async def read(size: int = size, got: list[int] = got) -> None:
                while got[0] < size:
                    response = await asyncio.wait_for(call.read(), RESPONSE_TIMEOUT)
                    if response is grpc.aio.EOF:
                        return
                    got[0] += 1
                    kind, parsed = _describe(response)
                    counts.responses[kind] += 1
                    if parsed is not None:
                        stream.learn(parsed)

            reader = asyncio.ensure_future(read())
            sent = 0
            oversized: int | None = None  # the index of one over the limit
            try:
                for _ in range(size):
                    data = message_bytes(rng, stream)
                    if len(data) >= OVERSIZED_BYTES and oversized is None:
                        oversized = sent
                    await call.write(data)
                    sent += 1
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                pass  # the stream ended under us: what was sent is counted below
            budget[0] += size - sent
            counts.messages += sent
            counts.requests += sent
            try:
                await reader
            except TimeoutError:
                counts.hangs += 1
            except grpc.aio.AioRpcError:
                pass
            counts.answered += got[0]
            if oversized is not None and got[0] == oversized:  # refused, as designed
                counts.closed_oversized += 1
                counts.requests -= sent - got[0]
            else:
                counts.unanswered += sent - got[0]
            if got[0] < sent:
                ended = True
                break
        if not ended:
            await call.done_writing()
        code = await call.code()
        counts.stream_ends[code.name] += 1
        if code is not grpc.StatusCode.OK:
            counts.stream_end_details[f"{code.name}: {(await call.details())[:200]}"] += 1
    finally:
        call.cancel()


async def _healthy(channel: grpc.aio.Channel) -> bool:
    """Whether the port answers a new stream's request (an empty one: INVALID_ARGUMENT)."""
    call = channel.stream_stream(_METHOD)()
    try:
        async with asyncio.timeout(RESPONSE_TIMEOUT):
            await call.write(b"")
            response = await call.read()
        return response is not grpc.aio.EOF and _describe(response)[0] == "error:INVALID_ARGUMENT"
    except (TimeoutError, grpc.aio.AioRpcError):
        return False
    finally:
        call.cancel()


async def run(port: int, count: int, seed: int = 0, *, streams: int = STREAMS,
              credentials: grpc.ChannelCredentials | None = None) -> Counts:
    """Send about ``count`` requests to the dm_env_rpc port at ``port`` (a remote without
    a password; ``credentials`` for one that serves TLS); the counts. A stream that ends
    before its requests were answered is followed by a check that the port still
    answers a new one (a crash if not; the fuzz then stops)."""
    rng = random.Random(seed)
    counts = Counts()
    budget = [count]
    world = ["builtin.Catch-v0/1"]  # the remote's world, as the streams last heard
    target = f"127.0.0.1:{port}"
    options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    channel = (grpc.aio.secure_channel(target, credentials, options) if credentials is not None
               else grpc.aio.insecure_channel(target, options))
    async with channel:
        try:
            await asyncio.wait_for(channel.channel_ready(), RESPONSE_TIMEOUT)
        except TimeoutError:
            counts.crashes += 1
            return counts

        async def worker(index: int) -> None:
            own = random.Random(rng.random() + index)
            while budget[0] > 0 and not counts.crashes:
                unanswered = counts.unanswered + counts.hangs
                try:
                    await _stream(channel, own, counts, budget, world)
                except grpc.aio.AioRpcError as exc:
                    counts.stream_ends[exc.code().name] += 1
                if counts.unanswered + counts.hangs > unanswered and not await _healthy(channel):
                    counts.crashes += 1

        await asyncio.gather(*(worker(i) for i in range(streams)))
    return counts
