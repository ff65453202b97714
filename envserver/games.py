"""Several games in one remote process: ``serve ENV --games K``.

Holds :func:`serve_games`, :func:`game_ports`, :func:`parse_game_ports` and
:func:`games_banner`. Each game is a whole :class:`~envserver.remote.Remote` — its own
ports, runtime, env id (a reset may switch it), seats, episodes, recording (``--record
DIR`` records game i under ``DIR/game-i``) and fault handling — and all of them share
the process's event loop and its ticker (:mod:`envserver.ticker`): one wake-up per frame
serves every game, where K processes would each wake 60 times a second (the cost that
dominated a small game's frame, issue 28). They share one failed-password throttle too,
so K games do not give a guesser K times the tries.

Faults: a runtime error is its game's alone (that game recovers as any remote does);
a game that fails past ``MAX_RUNTIME_FAILURES`` closes its own ports and the others play
on; the process exits with :data:`~envserver.cli.EXIT_RUNTIME_FAILED` only when no game
is left. What sharing costs: a crash of the process itself (killed, out of memory, a
bug outside a runtime) takes all K games down at once, and a runtime that holds the
event loop (a long lockstep slice, a slow reset that does not await) delays the other
games' frames by as long.

Ports: game i serves on the given ``--vnc-port``/``--rewarder-port`` (and the viewer,
dm_env_rpc and OpenEnv ports, when asked for) plus i, 0 picks free ones, and with none
given the first run of K free pairs 5900+i/15900+i; ``--game-ports`` names each game's
pair (what :meth:`remotes.local.LocalRemotes.restart` passes to bring a process back on
its old ports). The banner prints one ``agent address`` line per game.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .ports import FLOAT_RANGE, REWARDER_BASE, VNC_BASE, is_free

if TYPE_CHECKING:
    from rewarder.tls import ServerTLS

    from .remote import Remote

log = logging.getLogger("universe-remote")

#: Games one process may serve (``--games``): past ~16 one core is busy with them
#: (docs/vnc.md, "What a real-time frame costs").
MAX_GAMES: Final = 64
#: How a game's directory under ``--record DIR`` is named.
RECORD_DIR: Final = "game-{}"


@dataclass(frozen=True, slots=True)
class GamePorts:
    """The ports of one game (None: that port is not served; 0: a free one)."""

    vnc: int
    rewarder: int
    http: int | None
    dm_env_rpc: int | None
    openenv: int | None


def parse_game_ports(text: str) -> list[tuple[int, int]]:
    """``--game-ports 5900+15900,5901+15901`` -> [(5900, 15900), (5901, 15901)]."""
    pairs = []
    for item in text.split(","):
        vnc, sep, rewarder = item.strip().partition("+")
        if not sep or not vnc.isdigit() or not rewarder.isdigit():
            raise argparse.ArgumentTypeError(
                f"{text!r}: write each game's VNC+REWARDER ports, comma separated "
                "(5900+15900,5901+15901)"
            )
        pairs.append((int(vnc), int(rewarder)))
    return pairs


def games_of(args: argparse.Namespace) -> int:
    """How many games ``serve`` was asked for (``--games``, or ``--game-ports``' count)."""
    listed = getattr(args, "game_ports", None)
    return len(listed) if listed else int(getattr(args, "games", 1) or 1)


def several_games(args: argparse.Namespace) -> bool:
    """Whether ``serve`` runs :func:`serve_games`: more than one game, or ports listed."""
    return games_of(args) > 1 or bool(getattr(args, "game_ports", None))


def check_games(args: argparse.Namespace) -> str | None:
    """Why ``--games``/``--game-ports`` cannot be served as given, else None."""
    games, listed = int(getattr(args, "games", 1) or 1), getattr(args, "game_ports", None)
    if not 1 <= games <= MAX_GAMES:
        return f"--games must be 1..{MAX_GAMES} (MAX_GAMES), not {games}"
    if listed:
        if games not in (1, len(listed)):
            return f"--games {games} but --game-ports names {len(listed)} games: give one of them"
        if args.vnc_port is not None or args.rewarder_port is not None:
            return "--game-ports names every game's ports: leave out --vnc-port/--rewarder-port"
        if len(listed) > MAX_GAMES:
            return f"--game-ports names {len(listed)} games; at most {MAX_GAMES} (MAX_GAMES)"
    return None


def _plus(port: int | None, i: int) -> int | None:
    return port + i if port else port


def game_ports(args: argparse.Namespace, games: int) -> tuple[list[GamePorts], str | None]:
    """Each game's ports (module docstring), and a note for the banner when they are not
    the ones asked for. ``args.ports`` is what :func:`envserver.ports.choose_ports` chose
    for one game."""
    ports = args.ports
    http, dm, openenv = ports.http, args.dm_env_rpc_port, getattr(args, "openenv_port", None)
    listed = getattr(args, "game_ports", None)
    note = getattr(args, "ports_note", None)
    if listed:
        pairs, note = list(listed), None
    elif args.vnc_port is None and args.rewarder_port is None:  # floating: K free pairs in a row
        first = next((
            i for i in range(FLOAT_RANGE)
            if all(is_free(args.host, VNC_BASE + i + j) and is_free(args.host, REWARDER_BASE + i + j)
                   for j in range(games))
        ), 0)
        pairs = [(VNC_BASE + first + j, REWARDER_BASE + first + j) for j in range(games)]
        note = (f"{VNC_BASE}..{VNC_BASE + games - 1} or {REWARDER_BASE}.. are taken: serving "
                f"on the next {games} free pairs from {VNC_BASE + first}/{REWARDER_BASE + first}"
                if first else None)
    else:
        pairs = [(_plus(ports.vnc, i) or 0, _plus(ports.rewarder, i) or 0) for i in range(games)]
    return [
        GamePorts(vnc, rewarder, _plus(http, i), _plus(dm, i), _plus(openenv, i))
        for i, (vnc, rewarder) in enumerate(pairs)
    ], note


async def _start_game(
    args: argparse.Namespace, tls: ServerTLS | None, index: int, ports: GamePorts,
    throttle: Any,
) -> tuple[Remote, Any, Any]:
    """Game ``index``: its remote started on ``ports``, its OpenEnv port, its recorder."""
    from .cli import _replay_runtime, runtime_options
    from .front_ends import start_openenv
    from .recorder import Recorder
    from .remote import Remote

    remote = Remote(
        _replay_runtime(args) if args.command == "replay" else args.env_id,
        fps=args.fps, password=args.password, view_only_password=args.view_only_password,
        mode=args.mode, runtime_options=runtime_options(args), allow_origins=args.allow_origin,
        max_viewers=args.max_viewers, tls=tls,
        player_passwords=dict(getattr(args, "player_password", None) or []),
        auth_throttle=throttle,
    )
    record = getattr(args, "record", None)
    recorder = None
    if record is not None:
        recorder = Recorder(Path(record) / RECORD_DIR.format(index))
        recorder.attach(remote)
    try:
        await remote.start(args.host, ports.rewarder, ports.vnc, ports.http, ports.dm_env_rpc)
    except BaseException:
        if recorder is not None:
            recorder.close()
        raise
    if remote.viewer is not None and getattr(args, "control_password", None):
        remote.viewer.allow_control(args.control_password)
    openenv = None
    if ports.openenv is not None:
        try:
            openenv = await start_openenv(remote, args.host, ports.openenv)
        except BaseException:
            await remote.close("the remote failed to start")
            if recorder is not None:
                recorder.close()
            raise
    return remote, openenv, recorder


class _Game:
    """One started game and what to close with it."""

    def __init__(self, index: int, remote: Remote, openenv: Any, recorder: Any) -> None:
        self.index, self.remote, self.openenv, self.recorder = index, remote, openenv, recorder

    async def close(self, reason: str) -> None:
        try:
            if self.openenv is not None:
                await self.openenv.close(reason)
            await self.remote.close(reason)
        finally:
            if self.recorder is not None:
                self.recorder.close()


def games_banner(args: argparse.Namespace, games: list[_Game], note: str | None) -> str:
    """The banner of a process of several games: game 0's full banner (every port, TLS,
    recording), then one ``agent address`` line per other game with its other ports."""
    from .banner import banner, connect_hosts

    first = games[0].remote
    runtime = first.runtime
    host, _ = connect_hosts(args.host)
    scheme = "vnc+tls" if first.tls is not None else "vnc"
    secret = "?password=<password>" if args.password else ""
    lines = [
        f"universe-remote: {len(games)} games of {runtime.env_id} in one process (one game "
        f"loop; each game its own ports and episodes; a crash of the process ends them all)",
        "game 0:",
        banner(args, first, games[0].openenv, note).removesuffix("\n  Ctrl-C to stop."),
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
        more = f"   ({', '.join(extra)})" if extra else ""
        lines.append(f"game {game.index}:  agent address  {scheme}://{host}:{remote.vnc_port}+"
                     f"{remote.rewarder.port}{secret}{more}")
    if getattr(args, "record", None) is not None:
        lines.append(f"  (game i records under {Path(args.record).resolve()}/"
                     f"{RECORD_DIR.format('i')}/)")
    lines.append("  Ctrl-C to stop.")
    return "\n".join(lines)


async def serve_games(
    args: argparse.Namespace, tls: ServerTLS | None = None, stop: asyncio.Event | None = None,
    started: Callable[[list[Remote]], None] | None = None,
) -> int:
    """Serve :func:`games_of` games in this process until SIGINT/SIGTERM (or ``stop`` is
    set, when given), or until every game failed past recovery (then
    :data:`~envserver.cli.EXIT_RUNTIME_FAILED`). ``started`` hears the games' remotes
    once they serve (tests)."""
    from rewarder.shm import sweep

    from .cli import EXIT_RUNTIME_FAILED
    from .throttle import AuthThrottle

    sweep()  # frame segments of remotes that are gone
    count = games_of(args)
    ports, note = game_ports(args, count)
    throttle = AuthThrottle()  # one per process: K games are not K times the guesses
    games: list[_Game] = []
    try:
        for i, its_ports in enumerate(ports):
            games.append(_Game(i, *await _start_game(args, tls, i, its_ports, throttle)))
    except BaseException:
        await asyncio.gather(*(g.close("the remote failed to start") for g in games),
                             return_exceptions=True)
        raise
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    print(games_banner(args, games, note), flush=True)
    if started is not None:
        started([game.remote for game in games])
    stopped = asyncio.ensure_future(stop.wait())
    live: dict[asyncio.Future[Any], _Game] = {game.remote.failed: game for game in games}
    try:
        while live:
            waits: list[asyncio.Future[Any]] = [stopped, *live]
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if stopped in done:
                break
            for failed in done:
                game = live.pop(failed)
                reason = failed.result()
                log.error("game %d (VNC %s) failed: %s; closing its ports, %d game(s) still "
                          "serve", game.index, game.remote.vnc_port, reason, len(live))
                await _close_logged(game, f"the remote failed: {reason}")
    finally:
        stopped.cancel()
    if not live:
        log.error("exiting with status %d: every game failed", EXIT_RUNTIME_FAILED)
        return EXIT_RUNTIME_FAILED
    log.info("shutting down")
    await asyncio.gather(*(_close_logged(g, "the remote is shutting down (signal received)")
                           for g in live.values()))
    return 0


async def _close_logged(game: _Game, reason: str) -> None:
    try:
        await game.close(reason)
    except Exception as exc:  # each part's failure was logged by Remote.close
        log.error("closing game %d failed: %r", game.index, exc)
