"""Several games in one remote process (issue 28): one ticker wakes once per frame for all
of them, each game answers on its own ports with its own episodes, and a runtime that
fails is its own game's trouble — the others keep 60 fps, and a game that fails past
MAX_RUNTIME_FAILURES closes only its own ports while the process serves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import pytest

from envserver import agent_port, games, recovery
from envserver.cli import serve_config
from envserver.config import EXIT_RUNTIME_FAILED, ServeConfig
from envserver.games import serve_games
from envserver.orders import Refused, ResetOrder
from envserver.remote import MAX_RUNTIME_FAILURES, Remote
from envserver.ticker import shared_ticker
from remotes import RemoteEnv, RemoteVectorEnv, start_local
from rewarder.protocol import LOCKSTEP
from runtimes import registry
from tests.conftest import StartRemote
from universe_remote.cli import build_parser

#: Frames a second a healthy game must keep while another fails (of 60, on a loaded
#: 2-core machine).
HEALTHY_FPS: Final = 45.0
#: Seconds the healthy games' rate is measured over.
WINDOW: Final = 1.5
TIMEOUT: Final = 30.0


async def _rate(remote: Remote, seconds: float = WINDOW) -> float:
    """Frames ``remote`` drew per second over ``seconds``."""
    first, began = remote.frame, time.monotonic()
    await asyncio.sleep(seconds)
    return (remote.frame - first) / (time.monotonic() - began)


async def test_remotes_of_one_loop_share_one_timer_per_fps(start_remote: StartRemote) -> None:
    """One wake-up per frame for every game: the loop's ticker runs one timer for all
    remotes at 60 fps, a second one for a remote at 30, none for a lockstep remote, and
    each ticks at its own rate."""
    games = [await start_remote("builtin.Catch-v0") for _ in range(3)]
    ticker = shared_ticker()
    assert len(ticker) == 3 and ticker.timers == 1
    games[1].set_fps(30.0)
    assert ticker.timers == 2 and games[1].core in ticker
    lockstep = await start_remote("builtin.Catch-v0", mode=LOCKSTEP)
    assert lockstep.core not in ticker and len(ticker) == 3
    rates = await asyncio.gather(*(_rate(g) for g in games))
    assert rates[0] >= HEALTHY_FPS and rates[2] >= HEALTHY_FPS, rates
    assert 20.0 <= rates[1] <= 32.0, rates
    assert lockstep.frame == 0
    await games[0].close()
    assert games[0].core not in ticker and len(ticker) == 2


def _serve_args(*extra: str) -> ServeConfig:
    """``serve``'s configuration as the CLI builds it."""
    return serve_config(build_parser().parse_args(["serve", "builtin.Catch-v0", *extra]))


@contextlib.asynccontextmanager
async def _served(args: ServeConfig) -> AsyncIterator[tuple[list[Remote], asyncio.Event, asyncio.Task[int]]]:
    """``serve_games(args)`` in a task; its remotes once they serve, its stop, the task."""
    stop = asyncio.Event()
    served: asyncio.Future[list[Remote]] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(serve_games(args, stop=stop, started=served.set_result))
    try:
        waits: list[asyncio.Future[Any]] = [served, task]
        done, _ = await asyncio.wait(waits, timeout=TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        assert served in done, task.result() if task.done() else "the games did not start"
        yield served.result(), stop, task
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, TIMEOUT)


#: What a failing runtime's every frame and reset raise from: a real-time frame nobody
#: watches is played, not drawn (``play``, issue 44), so ``advance`` alone would fail only
#: at the first episode's natural end, seconds later.
_RUNTIME_METHODS: Final = ("advance", "play", "reset")


async def _refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


async def test_a_failing_game_is_its_own_the_others_keep_60_fps_and_the_process_serves_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(recovery, "RECOVER_DELAY", 0.05)
    args = _serve_args("--games", "3", "--vnc-port", "0", "--rewarder-port", "0")
    async with _served(args) as (games, _, task):
        assert len({g.vnc_port for g in games}) == 3 and len({g.rewarder.port for g in games}) == 3
        banner = capsys.readouterr().out
        for game in games:
            assert f"agent address  vnc://127.0.0.1:{game.vnc_port}+{game.rewarder.port}" in banner
        broken = games[1]
        vnc_port, rewarder_port = broken.vnc_port or 0, broken.rewarder.port

        def fail(*_: object, **__: object) -> Any:
            raise RuntimeError("injected runtime failure")

        for method in _RUNTIME_METHODS:
            monkeypatch.setattr(broken.runtime, method, fail)
        rates = await asyncio.gather(_rate(games[0]), _rate(games[2]))  # while it fails
        assert min(rates) >= HEALTHY_FPS, rates
        reason = await asyncio.wait_for(broken.failed, TIMEOUT)
        assert f"failed {MAX_RUNTIME_FAILURES} times in a row" in reason
        deadline = time.monotonic() + TIMEOUT
        while not await _refused(vnc_port):  # its ports close as the host closes it
            assert time.monotonic() < deadline, "the failed game's VNC port still answers"
            await asyncio.sleep(0.05)
        assert await _refused(rewarder_port)
        assert not task.done(), "the process ended with a game still serving"
        rates = await asyncio.gather(_rate(games[0]), _rate(games[2]))
        assert min(rates) >= HEALTHY_FPS, rates
        for game in (games[0], games[2]):
            assert not await _refused(game.vnc_port or 0)
            assert game.state.value == "running"
    assert task.result() == 0  # stopped (a signal's way): not every game had failed


async def test_when_every_game_failed_the_process_exits_for_its_supervisor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(recovery, "RECOVER_DELAY", 0.05)
    args = _serve_args("--games", "2", "--vnc-port", "0", "--rewarder-port", "0")
    async with _served(args) as (games, _, task):

        def fail(*_: object, **__: object) -> Any:
            raise RuntimeError("injected runtime failure")

        for game in games:
            for method in _RUNTIME_METHODS:
                monkeypatch.setattr(game.runtime, method, fail)
        assert await asyncio.wait_for(task, TIMEOUT) == EXIT_RUNTIME_FAILED


async def test_a_failed_env_switch_names_the_env_it_went_to_and_the_game_recovers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``--games`` game whose switch fails in making the new runtime: the refusal names
    the env that failed (and the one left), and the game recovers on the one it had."""
    monkeypatch.setattr(recovery, "RECOVER_DELAY", 0.05)
    target, found = "builtin.ClickTarget-v0", registry.lookup

    def lookup(env_id: str) -> Callable[..., Any]:
        if env_id != target:
            return found(env_id)

        def broken(**_: object) -> Any:
            raise RuntimeError("injected: the runtime cannot be made")
        return broken

    monkeypatch.setattr(registry, "lookup", lookup)
    args = _serve_args("--games", "2", "--vnc-port", "0", "--rewarder-port", "0")
    async with _served(args) as (games, _, _task):
        with pytest.raises(Refused) as refused:
            await agent_port.reset(games[1], ResetOrder(env_id=target, seed=1))
        said = refused.value.reason
        assert said.startswith(f"{target} failed in the switch to it from builtin.Catch-v0 "
                               "(RuntimeError: injected: the runtime cannot be made)"), said
        assert "the remote is recovering" in said
        assert await agent_port.reset(games[1], ResetOrder(seed=1)) > 0  # recovered
        assert games[1].env_id == games[0].env_id == "builtin.Catch-v0"


def test_each_game_of_a_serve_process_answers_on_its_own_ports_with_its_own_episodes() -> None:
    """A real ``serve --games 3`` process (start_local): three addresses, one process;
    each game resets, switches env and counts episodes on its own."""
    with start_local("builtin.Catch-v0", 3, games_per_process=3) as local:
        assert len(local.processes) == 1 and local.games == [3]
        assert local.siblings(1) == [0, 1, 2] and local.process_of(2) is local.processes[0]
        envs = [RemoteEnv(local.address_of(i), mode="lockstep") for i in range(3)]
        try:
            for env in envs:
                env.reset(seed=1)
            _, first = envs[0].reset(seed=1)
            switched = RemoteEnv(local.address_of(2), env_id="builtin.ClickTarget-v0",
                                 mode="lockstep")
            try:
                obs, _ = switched.reset(seed=2)
                assert obs.shape == (240, 320, 3)
            finally:
                switched.close()
            for env in envs[:2]:
                obs, *_ = env.step(env.action_space.sample())
                assert obs.shape == (210, 160, 3) and env.describe["env_id"] == "builtin.Catch-v0"
            _, again = envs[0].reset(seed=1)
            _, other = envs[1].reset(seed=1)
            assert again["episode_id"] == first["episode_id"] + 1
            assert other["episode_id"] < again["episode_id"]  # game 1 reset fewer times
        finally:
            for env in envs:
                env.close()


def test_killing_a_process_of_games_is_seen_and_reconnected_by_every_agent() -> None:
    """``LocalRemotes.kill(i)`` kills remote i's process and its siblings with it: every
    slot of a RemoteVectorEnv over those games reports the loss, and after
    ``restart(i)`` (the same ports, ``serve --game-ports``) every one comes back; a
    remote of another process never notices."""
    with start_local("builtin.Catch-v0", 4, games_per_process=3) as local:
        assert local.games == [2, 2] and len(local.processes) == 2  # as even as they go
        env = RemoteVectorEnv(local.address, start_timeout=10)
        try:
            env.reset(seed=0)
            pid = local.process_of(0).pid
            local.kill(1)
            errors: dict[int, str] = {}
            for _ in range(600):  # at most ~10 s of steps
                _, _, _, truncated, info = env.step([[]] * 4)
                errors |= {i: str(info["remote.error"][i]) for i in range(4) if truncated[i]}
                if set(errors) >= {0, 1}:
                    break
            assert set(errors) == {0, 1}, errors  # the siblings, and only them
            assert all("connection lost" in why for why in errors.values()), errors
            local.restart(0)
            assert local.process_of(1).pid != pid and local.process_of(0) is local.process_of(1)
            back: set[int] = set()
            for _ in range(900):
                _, _, _, _, info = env.step([[]] * 4)
                if "_remote.reconnected" in info:
                    back |= {i for i in range(4) if info["_remote.reconnected"][i]}
                if back >= {0, 1}:
                    break
            assert back >= {0, 1}, back
            assert [r.connected for r in env.remotes] == [True] * 4
        finally:
            env.close()


def test_once_every_game_serves_its_objects_are_left_to_live(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve`` freezes what it made to start (``gc.freeze`` when the games serve): the
    collector's full passes stop walking every runtime and server (20 ms each with Pong).
    Its path is ``games.run`` -> ``serve_games(started=...)``; the games are stubbed here."""
    seen: list[int] = []

    async def serving(config: ServeConfig, tls: Any, *, ports: Any, started: Callable[[list[Remote]], None]
                      ) -> int:
        seen.append(gc.get_freeze_count())
        started([])
        seen.append(gc.get_freeze_count())
        return 0

    monkeypatch.setattr(games, "serve_games", serving)
    config = _serve_args("--rewarder-port", "0", "--vnc-port", "0")
    before = gc.get_freeze_count()
    try:
        assert games.run(config) == 0
        assert seen[0] == before and seen[1] > before
    finally:
        gc.unfreeze()
