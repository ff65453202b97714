"""Recording several agents in one world: each event notes its player, each step every
player's reward, and re-running the episode with those events gives every frame."""

from __future__ import annotations

import asyncio
from pathlib import Path

from envserver.recorder import Recorder
from envserver.remote import Remote
from recordings import open_recording
from rewarder.client import RewarderClient
from tests.recordings.helpers import rerun


async def test_every_players_input_and_reward_is_recorded(tmp_path: Path) -> None:
    remote = Remote("builtin.Duel-v0")
    recorder = Recorder(tmp_path)
    recorder.attach(remote)
    await remote.start("127.0.0.1", 0, 0)
    address = f"127.0.0.1:{remote.rewarder.port}"
    returns = [0.0, 0.0]
    try:
        async with RewarderClient(address) as a, RewarderClient(address, player=1) as b:
            await asyncio.gather(a.reset(seed=9, mode="lockstep"), b.reset(seed=9, mode="lockstep"))
            for i in range(400):
                up, down = ("KeyEvent", "Up", i % 16 < 8), ("KeyEvent", "Down", i % 16 >= 8)
                ra, rb = await asyncio.gather(a.step([up, down], frames=4), b.step([down], frames=4))
                returns[0] += ra.reward
                returns[1] += rb.reward
                if ra.done:
                    break
    finally:
        await remote.close()
        recorder.close()
    (episode,) = [e for e in open_recording(tmp_path) if e.seed == 9]
    assert episode.meta["players"] == 2
    players = {(ev.source, ev.player) for s in episode.steps for ev in s.events}
    assert players == {("agent", 0), ("agent:1", 1)}
    rewards = [s.rewards for s in episode.steps if s.rewards is not None]
    assert rewards and all(len(r) == 2 and r[0] == -r[1] for r in rewards)
    assert [sum(r[p] for r in rewards) for p in (0, 1)] == returns  # what each agent got
    assert episode.total_reward == returns[0]  # ``reward`` stays player 0's
    assert rerun(episode) == [s.hash for s in episode.steps]
