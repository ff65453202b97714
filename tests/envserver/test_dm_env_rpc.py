"""The dm_env_rpc port against dm_env_rpc's own compliance suites and dm_env's test mixin,
over gRPC on 127.0.0.1, on real remote processes (``universe-remote serve
--dm-env-rpc-port``); then what the suites don't cover: properties, passwords, one agent
per remote across both front ends, real time, and determinism against the rewarder path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from tests.optional import need_extra

need_extra("dmenv")

import grpc  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from absl.testing import absltest  # noqa: E402
from dm_env import test_utils  # noqa: E402
from dm_env_rpc.v1 import connection as dm_connection, dm_env_adaptor, dm_env_rpc_pb2, error, tensor_utils  # noqa: E402
from dm_env_rpc.v1.compliance import create_destroy_world, join_leave_world, reset, reset_world, step  # noqa: E402
from dm_env_rpc.v1.extensions import properties  # noqa: E402

from remotes import RemoteEnv  # noqa: E402
from rewarder.client import RewarderClient, basic_auth  # noqa: E402
from rewarder.errors import ConnectionClosed  # noqa: E402

#: Seconds a remote may take to start, and a gRPC call to answer.
TIMEOUT: Final = 30.0
PASSWORD: Final = "dm-pw"
_BANNER: Final = re.compile(r"dm_env_rpc\s+127\.0\.0\.1:(\d+)")
_AGENT: Final = re.compile(r"agent address\s+(vnc://\S+)")


class Served:
    """A ``universe-remote serve`` subprocess with its dm_env_rpc port."""

    def __init__(
        self, env_id: str = "builtin.Catch-v0", *extra: str, log: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """``log``: where its stderr goes (else nowhere); ``env``: added to its environment."""
        self.log = log
        with open(log, "wb") if log is not None else contextlib.nullcontext() as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "universe_remote", "serve", env_id, "--dm-env-rpc-port",
                 "0", "--rewarder-port", "0", "--vnc-port", "0", *extra],
                stdout=subprocess.PIPE, stderr=err if err is not None else subprocess.DEVNULL,
                text=True, env={**os.environ, **(env or {})},
            )
        self.port = 0
        self.address = ""
        ready = threading.Event()
        threading.Thread(target=self._read, args=(ready,), daemon=True).start()
        if not ready.wait(TIMEOUT) or not self.port:
            self.close()
            pytest.fail(f"universe-remote serve {env_id} did not print its dm_env_rpc port")

    def _read(self, ready: threading.Event) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if found := _BANNER.search(line):
                self.port = int(found.group(1))
            if found := _AGENT.search(line):
                self.address = found.group(1).split("?")[0]
                ready.set()
        ready.set()

    @property
    def rewarder(self) -> str:
        """The rewarder's ``host:port``."""
        return "127.0.0.1:" + self.address.rpartition("+")[2]

    def connect(self, password: str | None = None) -> dm_connection.Connection:
        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        grpc.channel_ready_future(channel).result(TIMEOUT)
        metadata = [("authorization", basic_auth(password))] if password else None
        return dm_connection.Connection(channel, metadata=metadata)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def pack(value: Any) -> dm_env_rpc_pb2.Tensor:
    return tensor_utils.pack_tensor(value)


@pytest.fixture(scope="module")
def catch() -> Iterator[Served]:
    served = Served()
    yield served
    served.close()


def create(connection: dm_connection.Connection, **settings: Any) -> str:
    """A world (of Catch unless ``env_id`` says otherwise: worlds switch the remote's env)."""
    settings.setdefault("env_id", "builtin.Catch-v0")
    request = dm_env_rpc_pb2.CreateWorldRequest(settings={k: pack(v) for k, v in settings.items()})
    return str(connection.send(request).world_name)


def join(connection: dm_connection.Connection, world: str) -> dm_env_rpc_pb2.ActionObservationSpecs:
    return connection.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=world)).specs


class _OnARemote:
    """A fresh stream per test, on the module's Catch remote; the world gone after it."""

    served: Served
    world_settings: dict[str, Any] = {"mode": "lockstep", "frameskip": 2, "env_id": "builtin.Catch-v0"}
    _connection: dm_connection.Connection
    _world: str | None

    @pytest.fixture(autouse=True)
    def _remote(self, catch: Served) -> Iterator[None]:
        type(self).served = catch
        yield

    def setUp(self) -> None:
        self._connection = self.served.connect()
        self._world = None
        super().setUp()  # type: ignore[misc]

    def tearDown(self) -> None:
        try:
            super().tearDown()  # type: ignore[misc]
        finally:
            self._connection.send(dm_env_rpc_pb2.LeaveWorldRequest())
            if self._world is not None:
                self._connection.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=self._world))
            self._connection.close()

    @property
    def connection(self) -> dm_connection.Connection:
        return self._connection

    @property
    def world_name(self) -> str:
        return self._created()

    def _created(self) -> str:
        if self._world is None:
            self._world = create(self._connection, **self.world_settings)
        return self._world


# dm_env_rpc's compliance suites, every test of each --------------------------------------


class TestCreateDestroyWorld(_OnARemote, create_destroy_world.CreateDestroyWorld):
    @property
    def required_world_settings(self) -> dict[str, Any]:
        return {}  # a world of the remote as it runs

    @property
    def invalid_world_settings(self) -> dict[str, Any]:
        return {"mode": pack("sideways"), "frameskip": pack(0), "seed": pack(-5),
                "env_id": pack("builtin.Missing-v0"), "colour": pack(1)}

    @property
    def has_multiple_world_support(self) -> bool:
        return False


class TestJoinLeaveWorld(_OnARemote, join_leave_world.JoinLeaveWorld):
    @property
    def invalid_join_settings(self) -> dict[str, Any]:
        return {"seed": pack(1)}  # settings belong to worlds


class TestReset(_OnARemote, reset.Reset):
    def join_world(self) -> dm_env_rpc_pb2.ActionObservationSpecs:
        return join(self._connection, self._created())


class TestResetWorld(_OnARemote, reset_world.ResetWorld):
    """Everything it needs is on the base: a connection and a world."""


class TestStep(_OnARemote, step.Step):
    def setUp(self) -> None:
        super().setUp()
        self._specs = join(self._connection, self._created())

    @property
    def specs(self) -> dm_env_rpc_pb2.ActionObservationSpecs:
        return self._specs


class TestStepWithPointerActions(TestStep):
    """ClickTarget: pointer and buttons actions (a world switches the remote's env)."""

    world_settings = {"mode": "lockstep", "env_id": "builtin.ClickTarget-v0"}


class TestStepWithADiscreteAction(TestStep):
    """Pong: the minimal action set as one bounded ``action``, beside the held keys."""

    world_settings = {"mode": "lockstep", "env_id": "atari.Pong-v0", "frameskip": 4}


class TestDmEnv(_OnARemote, test_utils.EnvironmentTestMixin, absltest.TestCase):
    """dm_env's own checks of a ``dm_env.Environment``, through ``DmEnvAdaptor``."""

    def make_object_under_test(self) -> dm_env_adaptor.DmEnvAdaptor:
        specs = join(self._connection, self._created())
        return dm_env_adaptor.DmEnvAdaptor(self._connection, specs)


# Beyond the suites ------------------------------------------------------------------------


def test_specs_say_what_each_runtime_takes(catch: Served) -> None:
    with catch.connect() as connection:
        world = create(connection, mode="lockstep", env_id="atari.Pong-v0")
        try:
            specs = join(connection, world)
            actions = {s.name: s for s in specs.actions.values()}
            observations = {s.name: s for s in specs.observations.values()}
            assert list(observations["RGB"].shape) == [210, 160, 3]
            assert set(observations) == {"RGB", "reward", "text", "episode_id", "frame"}
            assert set(actions) == {"keys", "action"}
            assert actions["action"].max.int32s.array == [5]  # Pong's 6 minimal actions
            connection.send(dm_env_rpc_pb2.StepRequest())  # the first step starts the sequence
            uid = next(u for u, s in specs.actions.items() if s.name == "action")
            bad = dm_env_rpc_pb2.StepRequest(actions={uid: tensor_utils.pack_tensor(np.int32(6))})
            with pytest.raises(error.DmEnvRpcError, match=r"action.* = 6 is out of bounds: min 0, max 5"):
                connection.send(bad)
        finally:
            connection.send(dm_env_rpc_pb2.LeaveWorldRequest())
            connection.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))


def test_properties_read_write_and_refuse_clearly(catch: Served) -> None:
    with catch.connect() as connection:
        world = create(connection, mode="lockstep", frameskip=3, seed=7)
        try:
            props = properties.PropertiesExtension(connection)
            specs = props.specs()
            assert {"env_id", "fps", "mode", "frameskip", "seed", "version", "width"} <= set(specs)
            assert specs["fps"].writable and not specs["env_id"].writable
            assert all(spec.description for spec in specs.values())
            assert props["env_id"] == "builtin.Catch-v0" and props["frameskip"] == 3
            assert props["seed"] == 7 and props["mode"] == "lockstep"
            assert re.fullmatch(r"\d+\.\d+.*", str(props["version"]))
            props["fps"] = 30.0
            assert props["fps"] == 30.0
            props["frameskip"] = 5
            assert props["frameskip"] == 5
            with pytest.raises(KeyError):
                props["colour"]
            with pytest.raises(PermissionError):
                props["env_id"] = "atari.Pong-v0"
            with pytest.raises(ValueError):
                props["fps"] = "fast"
            with pytest.raises(ValueError):
                props["fps"] = 1e9
            props["fps"] = 60.0
        finally:
            connection.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))


def test_a_mode_write_interrupts_the_sequence(catch: Served) -> None:
    with catch.connect() as connection:
        world = create(connection, mode="lockstep")
        try:
            join(connection, world)
            first = connection.send(dm_env_rpc_pb2.StepRequest())
            assert first.state == dm_env_rpc_pb2.EnvironmentStateType.RUNNING
            properties.PropertiesExtension(connection)["mode"] = "realtime"
            interrupted = connection.send(dm_env_rpc_pb2.StepRequest())
            assert interrupted.state == dm_env_rpc_pb2.EnvironmentStateType.INTERRUPTED
            frame_uid = 5
            a = connection.send(dm_env_rpc_pb2.StepRequest(requested_observations=[frame_uid]))
            b = connection.send(dm_env_rpc_pb2.StepRequest(requested_observations=[frame_uid]))
            # Real time: each step returns a newer frame (the remote's clock runs on).
            frames = [tensor_utils.unpack_tensor(r.observations[frame_uid]) for r in (a, b)]
            assert frames[1] > frames[0]
        finally:
            connection.send(dm_env_rpc_pb2.LeaveWorldRequest())
            connection.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))


def test_one_agent_per_remote_across_both_front_ends(catch: Served) -> None:
    with catch.connect() as connection:
        world = create(connection, mode="lockstep")
        try:
            join(connection, world)
            rewarder = RewarderClient(catch.rewarder, start_timeout=0.5)
            with pytest.raises(ConnectionClosed, match="busy: a dm_env_rpc agent"):
                asyncio.run(rewarder.start())
            with catch.connect() as second:
                with pytest.raises(error.DmEnvRpcError, match="another agent has joined"):
                    join(second, world)
        finally:
            connection.send(dm_env_rpc_pb2.LeaveWorldRequest())
            connection.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))


def test_a_password_is_asked_for_and_checked() -> None:
    served = Served("builtin.Catch-v0", "--password", PASSWORD)
    try:
        for password, words in ((None, "needs a password"), ("wrong", "wrong password")):
            with served.connect(password) as connection:
                # The stream ends with gRPC's own status, as authentication failures do.
                with pytest.raises(grpc.RpcError) as refused:
                    create(connection)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert words in str(refused.value.details())
        with served.connect(PASSWORD) as connection:
            world = create(connection)
            connection.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))
    finally:
        served.close()


def _hashes_over_dm_env_rpc(served: Served, seed: int, presses: list[int]) -> list[str]:
    with served.connect() as connection:
        world = create(connection, mode="lockstep", frameskip=4, seed=seed)
        try:
            specs = join(connection, world)
            rgb = next(u for u, s in specs.observations.items() if s.name == "RGB")
            keys = next(u for u, s in specs.actions.items() if s.name == "keys")
            out = []
            first = connection.send(dm_env_rpc_pb2.StepRequest(requested_observations=[rgb]))
            out.append(hashlib.sha1(tensor_utils.unpack_tensor(first.observations[rgb])).hexdigest())
            for left in presses:
                held = np.array([left, 1 - left], np.uint8)
                response = connection.send(dm_env_rpc_pb2.StepRequest(
                    actions={keys: tensor_utils.pack_tensor(held)}, requested_observations=[rgb]))
                out.append(hashlib.sha1(tensor_utils.unpack_tensor(response.observations[rgb])).hexdigest())
            return out
        finally:
            connection.send(dm_env_rpc_pb2.LeaveWorldRequest())
            connection.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))


def test_same_seed_and_actions_give_the_same_frames_as_the_rewarder(catch: Served) -> None:
    presses = [1, 1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0]
    over_dm = _hashes_over_dm_env_rpc(catch, 11, presses)
    assert over_dm == _hashes_over_dm_env_rpc(catch, 11, presses)  # and again the same
    env = RemoteEnv(catch.address, mode="lockstep", frameskip=4)
    try:
        obs, _ = env.reset(seed=11)
        over_rewarder = [hashlib.sha1(obs).hexdigest()]
        held: set[str] = set()
        for left in presses:
            want = {"Left"} if left else {"Right"}
            events = [("KeyEvent", k, False) for k in sorted(held - want)]
            events += [("KeyEvent", k, True) for k in sorted(want - held)]
            held = want
            obs, *_ = env.step(events)
            over_rewarder.append(hashlib.sha1(obs).hexdigest())
    finally:
        env.close()
    assert over_dm == over_rewarder
