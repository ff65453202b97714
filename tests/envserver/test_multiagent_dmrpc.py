"""dm_env_rpc with several agents in one world: JoinWorld's ``player`` seats each agent,
a taken seat is refused, lockstep steps wait for both, and each Step's reward is its own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.optional import need_extra

need_extra("dmenv")

from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb, error, tensor_utils  # noqa: E402

from rewarder.client import RewarderClient  # noqa: E402
from rewarder.errors import ConnectionClosed  # noqa: E402
from runtimes.duel import DUEL_HUD_HEIGHT, DUEL_PADDLE_X, DUEL_PLAYER_COLOURS  # noqa: E402
from tests.envserver.test_dm_env_rpc import Served, create, pack  # noqa: E402


@pytest.fixture(scope="module")
def duel() -> Iterator[Served]:
    served = Served("builtin.Duel-v0")
    try:
        yield served
    finally:
        served.close()


def join_as(connection, world: str, player: int) -> pb.ActionObservationSpecs:  # type: ignore[no-untyped-def]
    request = pb.JoinWorldRequest(world_name=world, settings={"player": pack(player)})
    return connection.send(request).specs


def test_two_agents_join_as_two_players_and_get_their_own_rewards(duel: Served) -> None:
    with duel.connect() as a, duel.connect() as b, duel.connect() as c:
        world = create(a, env_id="builtin.Duel-v0", mode="lockstep", frameskip=8, seed=3)
        try:
            specs = join_as(a, world, 0)
            join_as(b, world, 1)
            with pytest.raises(error.DmEnvRpcError, match="player 1 of builtin.Duel-v0 is held by "
                                                          "a dm_env_rpc agent"):
                join_as(c, world, 1)
            with pytest.raises(error.DmEnvRpcError, match="has 2 player"):
                join_as(c, world, 2)
            with pytest.raises(ConnectionClosed, match="player 0 is held by a dm_env_rpc agent"):
                asyncio.run(RewarderClient(duel.rewarder, start_timeout=0.3).start())
            ids = {s.name: u for u, s in specs.observations.items()}
            keys = next(u for u, s in specs.actions.items() if s.name == "keys")
            wanted = [ids["reward"], ids["frame"], ids["RGB"]]

            def step(connection, held: list[int]) -> pb.StepResponse:  # type: ignore[no-untyped-def]
                actions = {keys: tensor_utils.pack_tensor(np.array(held, np.uint8))}
                return connection.send(pb.StepRequest(actions=actions, requested_observations=wanted))

            rewards: list[tuple[float, float]] = []
            with ThreadPoolExecutor(2) as pool:
                for _ in range(200):
                    # Player 0 holds Down (keys: Up, Down), player 1 holds Up.
                    fa = pool.submit(step, a, [0, 1])
                    fb = pool.submit(step, b, [1, 0])
                    ra, rb = fa.result(30), fb.result(30)
                    frame_a = tensor_utils.unpack_tensor(ra.observations[ids["frame"]])
                    frame_b = tensor_utils.unpack_tensor(rb.observations[ids["frame"]])
                    assert frame_a == frame_b  # one world, one frame for both
                    rewards.append((float(tensor_utils.unpack_tensor(ra.observations[ids["reward"]])),
                                    float(tensor_utils.unpack_tensor(rb.observations[ids["reward"]]))))
                    if ra.state == pb.EnvironmentStateType.TERMINATED:
                        break
            assert all(x == -y for x, y in rewards)  # each its own: a point is +1 and -1
            assert any(x for x, _ in rewards)
            screen = tensor_utils.unpack_tensor(ra.observations[ids["RGB"]])
            court = screen[DUEL_HUD_HEIGHT:]  # (the points' pips above share the colours)
            left = np.flatnonzero((court[:, DUEL_PADDLE_X[0]] == DUEL_PLAYER_COLOURS[0]).all(1))
            right = np.flatnonzero((court[:, DUEL_PADDLE_X[1]] == DUEL_PLAYER_COLOURS[1]).all(1))
            assert left.max() == len(court) - 1  # player 0's Down took its paddle down
            assert right.min() == 0  # player 1's Up took its paddle up
        finally:
            for connection in (b, a):
                connection.send(pb.LeaveWorldRequest())
            a.send(pb.DestroyWorldRequest(world_name=world))
