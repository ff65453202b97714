"""The serve path: ``serve ENV`` serves one game, ``serve ENV --games K`` K games in one
process, both here and the same way (:func:`run`, :func:`serve_games`).

Holds :func:`run`, :func:`serve_games`, :func:`game_ports` and :func:`games_banner`. It
reads one frozen :class:`~envserver.config.ServeConfig` (:mod:`envserver.cli` parses the
command line into it). Each game is a whole :class:`~envserver.remote.Remote` — its own
ports, runtime, env id (a reset may switch it), seats, episodes, recording (``--record
DIR``; with several games, game i under ``DIR/game-i``) and fault handling — and all of
them share the process's event loop and its ticker (:mod:`envserver.ticker`): one
wake-up per frame serves every game, where K processes would each wake 60 times a second
(the cost that dominated a small game's frame, issue 28; ``python -m benchmarks
density``). They share one failed-password throttle too, so K games do not give a
guesser K times the tries.

Faults: a runtime error is its game's alone (that game recovers as any remote does);
a game that fails past ``MAX_RUNTIME_FAILURES`` closes its own ports and the others play
on; the process exits with :data:`~envserver.config.EXIT_RUNTIME_FAILED` only when no
game is left. What sharing costs: a crash of the process itself (killed, out of memory,
a bug outside a runtime) takes all K games down at once, and a runtime that holds the
event loop (a long lockstep slice, a slow reset that does not await) delays the other
games' frames by as long.

Ports: one game serves on the ports :func:`envserver.ports.choose_ports` chose. Game i
of several serves on the given ``--vnc-port``/``--rewarder-port`` (and the viewer,
dm_env_rpc and OpenEnv ports, when asked for) plus i, 0 picks free ones, and with none
given the first run of K free pairs 5900+i/15900+i; ``--game-ports`` names each game's
pair (what :meth:`remotes.local.LocalRemotes.restart` passes to bring a process back on
its old ports). The banner prints one ``agent address`` line per game.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rewarder.link_reader import held_loop

from .config import EXIT_CANNOT_LISTEN, EXIT_REFUSED, EXIT_RUNTIME_FAILED, ServeConfig
from .cpus import unpin_when_shared
from .ports import FLOAT_RANGE, REWARDER_BASE, VNC_BASE, Ports, busy_port_advice, choose_ports, is_free

if TYPE_CHECKING:
    from rewarder.throttle import AuthThrottle
    from rewarder.tls import ServerTLS

    from .remote import Remote

log = logging.getLogger("universe-remote")

#: How a game's directory under ``--record DIR`` is named, when the process serves several.
RECORD_DIR: Final = "game-{}"


@dataclass(frozen=True, slots=True)
class GamePorts:
    """The ports of one game (None: that port is not served; 0: a free one)."""

    vnc: int
    rewarder: int
    http: int | None
    dm_env_rpc: int | None
    openenv: int | None
    mcp: int | None = None


def _plus(port: int | None, i: int) -> int | None:
    return port + i if port else port


def game_ports(config: ServeConfig, ports: Ports) -> tuple[list[GamePorts], str | None]:
    """Each game's ports (module docstring), and a note for the banner when they are not
    the ones asked for. ``ports`` is what :func:`envserver.ports.choose_ports` chose for
    one game."""
    games, note = config.game_count, ports.note
    if config.game_ports:
        pairs, note = list(config.game_ports), None
    elif games > 1 and config.vnc_port is None and config.rewarder_port is None:
        host = config.host  # floating: K free pairs in a row
        first = next((
            i for i in range(FLOAT_RANGE)
            if all(is_free(host, VNC_BASE + i + j) and is_free(host, REWARDER_BASE + i + j)
                   for j in range(games))
        ), 0)
        pairs = [(VNC_BASE + first + j, REWARDER_BASE + first + j) for j in range(games)]
        note = (f"{VNC_BASE}..{VNC_BASE + games - 1} or {REWARDER_BASE}.. are taken: serving "
                f"on the next {games} free pairs from {VNC_BASE + first}/{REWARDER_BASE + first}"
                if first else None)
    else:
        pairs = [(_plus(ports.vnc, i) or 0, _plus(ports.rewarder, i) or 0) for i in range(games)]
    http, dm, openenv = ports.http, config.dm_env_rpc_port, config.openenv_port
    return [
        GamePorts(vnc, rewarder, _plus(http, i), _plus(dm, i), _plus(openenv, i), _plus(ports.mcp, i))
        for i, (vnc, rewarder) in enumerate(pairs)
    ], note


def _runtime(config: ServeConfig) -> Any:
    """The env id to serve, or for ``replay DIR`` the recording as a runtime
    (docs/recording.md)."""
    if config.recording is None:
        return config.env_id
    from runtimes.replay import replay_runtime

    return replay_runtime(config.recording, config.episode)()


def _record_dir(config: ServeConfig, index: int) -> Path | None:
    """Where game ``index`` records (``--record DIR``), or None."""
    if config.record is None:
        return None
    return Path(config.record) / RECORD_DIR.format(index) if config.several else Path(config.record)


async def _start_game(
    config: ServeConfig, tls: ServerTLS | None, index: int, ports: GamePorts, throttle: AuthThrottle,
) -> _Game:
    """Game ``index``: its remote started on ``ports``, its OpenEnv port, its recorder."""
    from .front_ends import start_mcp, start_openenv
    from .recorder import Recorder
    from .remote import Remote

    remote = Remote(
        _runtime(config),
        fps=config.fps, password=config.password, view_only_password=config.view_only_password,
        mode=config.mode, runtime_options=config.runtime_options, allow_origins=config.allow_origins,
        max_viewers=config.max_viewers, tls=tls, player_passwords=dict(config.player_passwords),
        auth_throttle=throttle,
    )
    record = _record_dir(config, index)
    game = _Game(index, remote, None, Recorder(record) if record is not None else None)
    if game.recorder is not None:
        game.recorder.attach(remote)
    try:
        await remote.start(config.host, ports.rewarder, ports.vnc, ports.http, ports.dm_env_rpc)
    except BaseException:
        game.close_recorder()
        raise
    if remote.viewer is not None and config.control_password:
        remote.viewer.allow_control(config.control_password)
    if ports.openenv is not None:
        try:
            game.openenv = await start_openenv(remote, config.host, ports.openenv)
        except BaseException:
            await remote.close("the remote failed to start")
            game.close_recorder()
            raise
    if ports.mcp is not None:
        try:
            game.mcp = await start_mcp(remote, config.host, ports.mcp, config.mcp_lease)
        except BaseException:
            await game.close("the remote failed to start")
            raise
    return game


class _Game:
    """One started game and what to close with it."""

    def __init__(self, index: int, remote: Remote, openenv: Any, recorder: Any) -> None:
        self.index, self.remote, self.openenv, self.recorder = index, remote, openenv, recorder
        self.mcp: Any = None  # the MCP port (serve --mcp-port)

    def close_recorder(self) -> None:
        if self.recorder is not None:
            self.recorder.close()

    async def close(self, reason: str) -> None:
        try:
            if self.mcp is not None:
                await self.mcp.close(reason)
            if self.openenv is not None:
                await self.openenv.close(reason)
            await self.remote.close(reason)
        finally:
            self.close_recorder()


def games_banner(config: ServeConfig, games: list[_Game], note: str | None) -> str:
    """The banner: one game's (:func:`envserver.banner.banner`), or for several game 0's
    full banner (every port, TLS, recording), then one ``agent address`` line per other
    game with its other ports."""
    from .banner import banner, connect_hosts

    first = games[0].remote
    if not config.several:
        return banner(config, first, games[0].openenv, note, mcp=games[0].mcp)
    runtime = first.runtime
    host, _ = connect_hosts(config.host)
    scheme = "vnc+tls" if first.tls is not None else "vnc"
    secret = "?password=<password>" if config.password else ""
    lines = [
        f"universe-remote: {len(games)} games of {runtime.env_id} in one process (one game "
        f"loop; each game its own ports and episodes; a crash of the process ends them all)",
        "game 0:",
        banner(config, first, games[0].openenv, note, mcp=games[0].mcp).removesuffix("\n  Ctrl-C to stop."),
    ]
    for game in games[1:]:
        remote = game.remote
        extra = []
        if remote.viewer is not None:
            extra.append(f"viewer {remote.viewer.port}")
        if remote.dm_env_rpc is not None:
            extra.append(f"dm_env_rpc {remote.dm_env_rpc.port}")
        if game.openenv is not None:
            extra.append(f"openenv {game.openenv.port}")
        if game.mcp is not None:
            extra.append(f"mcp {game.mcp.port}")
        more = f"   ({', '.join(extra)})" if extra else ""
        lines.append(f"game {game.index}:  agent address  {scheme}://{host}:{remote.vnc_port}+"
                     f"{remote.rewarder.port}{secret}{more}")
    if config.record is not None:
        lines.append(f"  (game i records under {Path(config.record).resolve()}/"
                     f"{RECORD_DIR.format('i')}/)")
    lines.append("  Ctrl-C to stop.")
    return "\n".join(lines)


async def serve_games(
    config: ServeConfig, tls: ServerTLS | None = None, *, ports: Ports | None = None,
    stop: asyncio.Event | None = None, started: Callable[[list[Remote]], None] | None = None,
) -> int:
    """Serve the configuration's games in this process (one, or ``--games K``) until
    SIGINT/SIGTERM (or ``stop`` is set, when given), or until every game failed past
    recovery (then :data:`~envserver.config.EXIT_RUNTIME_FAILED`). ``ports``: what
    :func:`~envserver.ports.choose_ports` chose (default: chosen here). ``started``
    hears the games' remotes once they serve (tests)."""
    from rewarder.shm import sweep
    from rewarder.throttle import AuthThrottle

    from .batch import BatchGames

    if ports is None:
        ports = choose_ports(config.host, config.vnc_port, config.rewarder_port, config.http_port,
                             config.mcp_port)
    sweep()  # frame segments of remotes that are gone (killed before they could remove them)
    each, note = game_ports(config, ports)
    throttle = AuthThrottle()  # one per process: K games are not K times the guesses
    games: list[_Game] = []
    try:
        for i, its_ports in enumerate(each):
            games.append(await _start_game(config, tls, i, its_ports, throttle))
    except BaseException:
        await asyncio.gather(*(g.close("the remote failed to start") for g in games),
                             return_exceptions=True)
        raise
    batches = BatchGames([g.remote for g in games]) if len(games) > 1 else None
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    print(games_banner(config, games, note), flush=True)
    if started is not None:
        started([game.remote for game in games])
    stopped = asyncio.ensure_future(stop.wait())
    live: dict[asyncio.Future[Any], _Game] = {game.remote.failed: game for game in games}
    watch = None if config.pinned is None else asyncio.ensure_future(unpin_when_shared(*config.pinned))
    try:
        while live:
            waits: list[asyncio.Future[Any]] = [stopped, *live]
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if stopped in done:
                break
            for failed in done:
                game = live.pop(failed)
                reason = failed.result()
                if config.several:
                    log.error("game %d (VNC %s) failed: %s; closing its ports, %d game(s) still "
                              "serve", game.index, game.remote.vnc_port, reason, len(live))
                else:
                    log.error("exiting with status %d: %s", EXIT_RUNTIME_FAILED, reason)
                await _close_logged(game, f"the remote failed: {reason}")
    finally:
        stopped.cancel()
        if watch is not None:
            watch.cancel()
    if not live:
        if config.several:
            log.error("exiting with status %d: every game failed", EXIT_RUNTIME_FAILED)
        return EXIT_RUNTIME_FAILED
    log.info("shutting down")
    await asyncio.gather(*(_close_logged(g, "the remote is shutting down (signal received)")
                           for g in live.values()))
    if batches is not None:
        batches.close()
    return 0


async def _close_logged(game: _Game, reason: str) -> None:
    try:
        await game.close(reason)
    except Exception as exc:  # each part's failure was logged by Remote.close
        log.error("closing game %d failed: %r", game.index, exc)


def _refused(why: object) -> int:
    print(f"universe-remote: {why}", file=sys.stderr)
    return EXIT_REFUSED


def _settled(remotes: list[Remote]) -> None:
    """Every game serves: what was made to start them (runtimes, servers, imports, about
    45,000 objects with Pong) lives as long as the process, so the collector leaves it
    alone from now on (``gc.freeze``). Its full collections had walked it all, about 20
    ms each (one every few thousand lockstep requests: a vector step late, a real-time
    frame missed), and its collections cost about 6 us a request against about 1.3."""
    gc.freeze()


def run(config: ServeConfig, tls: ServerTLS | None = None) -> int:
    """``serve``'s process: choose the ports, serve until stopped, and turn what went
    wrong into a line on stderr and an exit status (:mod:`envserver.config`)."""
    from runtimes.errors import RuntimeFailure

    host = config.host
    try:
        ports = choose_ports(host, config.vnc_port, config.rewarder_port, config.http_port, config.mcp_port)
    except OSError as exc:
        print(f"universe-remote: cannot listen on {host}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CANNOT_LISTEN
    try:
        # (its loop lets a lockstep connection be read on a thread: rewarder/link_reader.py)
        with asyncio.Runner(loop_factory=held_loop) as runner:
            return runner.run(serve_games(config, tls, ports=ports, started=_settled))
    except (RuntimeFailure, ValueError) as exc:  # unknown env, missing program, bad option, bad recording
        return _refused(exc)
    except BrokenPipeError:  # the banner's reader left (`| head`): universe_remote's main handles it
        raise
    except OSError as exc:
        print(
            f"universe-remote: cannot listen on {host}: {exc.strerror or exc}; "
            f"{busy_port_advice(host, ports)}. Other ports: --http-port, "
            "--dm-env-rpc-port, --openenv-port, --mcp-port.",
            file=sys.stderr,
        )
        return EXIT_CANNOT_LISTEN
