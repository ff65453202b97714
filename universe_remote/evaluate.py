"""``universe-remote eval``: an agent over task ids x seeds on N remotes, its trajectories kept.

The agent is a Python callable or an MCP host command; either way it sees the remote's
computer-use tools (docs/computer-use.md) and every call it makes goes through the
harness, which records it (:mod:`recordings.trajectories`: the layout), counts it against
the budget and passes it to the episode's remote over its MCP port.

- **A callable** ``agent(episode)`` runs in a thread of its own per episode;
  :meth:`Episode.call` is its tool call (``episode.call("computer", {"action":
  "left_click", "coordinate": [80, 100]})``), answering the MCP result as a dict.
- **A host command** (``--agent-command 'my-host --server {mcp}'``) is started per
  episode with ``{mcp}`` replaced by the command line of its MCP server on stdio
  (``{mcp_argv}``, a word of its own: the same as separate words; ``{task}``, ``{seed}``,
  ``{env_id}`` too). That server is :mod:`universe_remote.pipe`, which only carries the
  host's lines to the harness over a Unix socket: the relay itself
  (:class:`universe_remote.mcp_proxy.Relay`) runs here, so recording, the budget and the
  clock are in one place.

Per episode the harness resets the remote to the task and seed (``reset``, recorded as
step 0 ``"by": "harness"``) on the same MCP session the agent then uses, so the seat never
changes hands. The episode ends when an answer says ``done``, the agent returns (or its
host exits), or the budget is spent (``max_steps`` tool calls, ``max_seconds``): later
calls are refused (a callable's raise :class:`EpisodeOver`, a host's get a tool error)
and a host still running after :data:`STOP_GRACE` is terminated. Success is the remote's
(``done`` with a positive return: MiniWoB's) unless a ``judge`` says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from recordings.trajectories import TrajectoryWriter, episode_dir, write_results
from universe_remote.mcp_proxy import MAX_LINE_BYTES, Down, Refused, Relay, RemoteLink

log = logging.getLogger(__name__)

#: Seconds an agent gets to stop by itself once its episode is over, before its host is
#: terminated (a callable's thread is left to end at its next call).
STOP_GRACE: Final = 5.0
#: Tool calls an episode may make by default (MiniWoB's oracle needs under 20).
DEFAULT_MAX_STEPS: Final = 50
#: Seconds an episode may last by default.
DEFAULT_MAX_SECONDS: Final = 120.0
#: Remotes one run may start (each a browser or a desktop: memory bounds it first).
MAX_REMOTES: Final = 32
#: Seconds the remotes may take to start (Chromium on a loaded machine).
START_TIMEOUT: Final = 90.0

__all__ = ["Episode", "EpisodeOver", "evaluate", "load_agent", "parse_seeds"]

Agent = Callable[["Episode"], Any]
Judge = Callable[["Episode", dict[str, Any]], bool]


class EpisodeOver(Exception):
    """A tool call after the episode ended (done, or its budget spent): the message says which."""


@dataclass
class Episode:
    """One episode as the agent sees it: the task, the seed, the reset's answer, and
    :meth:`call` (a callable's tool call). The harness's bookkeeping lives here too."""

    task: str
    seed: int
    remote: int
    max_steps: int
    max_seconds: float
    stop_grace: float
    writer: TrajectoryWriter
    link: RemoteLink
    loop: asyncio.AbstractEventLoop
    reset_info: dict[str, Any] = field(default_factory=dict)
    steps: int = 0
    reward: float = 0.0
    episode_return: float | None = None
    done: bool = False
    status: str | None = None
    latencies: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    over: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def instruction(self) -> str:
        return str(self.reset_info.get("instruction") or "")

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """The remote's answer to ``tool`` (its MCP result: ``content``, ``isError``), from any
        thread but the harness's loop; :class:`EpisodeOver` once the episode has ended.

        Args:
            tool: the tool's name (``"computer"``, ``"reset"``...).
            arguments: its arguments (None: none).

        Returns:
            The MCP result as a dict (``content``: the screenshot and the JSON text;
            ``isError``).

        Raises:
            EpisodeOver: the episode ended (done, or its budget spent).
            TypeError: called from the harness's own loop (an async agent awaits :meth:`acall`).
        """
        if self.loop.is_closed():  # an agent left running after its run
            raise EpisodeOver("the eval run is over")
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is self.loop:
                raise TypeError("an async agent awaits episode.acall(tool, arguments); call() "
                                "from the harness's loop would wait on itself")
        if (why := self.refusal()) is not None:
            raise EpisodeOver(why)
        future = asyncio.run_coroutine_threadsafe(self.acall(tool, arguments or {}), self.loop)
        return future.result()

    async def acall(self, tool: str, arguments: dict[str, Any], by: str = "agent") -> dict[str, Any]:
        """:meth:`call` on the harness's loop (an async agent's).

        Args:
            tool: the tool's name.
            arguments: its arguments.
            by: ``"agent"`` (counted against the budget) or ``"harness"`` (the reset).

        Returns:
            The MCP result as a dict.

        Raises:
            EpisodeOver: an agent's call after the episode ended.
        """
        if by == "agent" and (why := self.refusal()) is not None:
            raise EpisodeOver(why)
        if by == "agent":
            self.steps += 1
        sent = time.monotonic()
        try:
            answer = await self.link.request("tools/call", {"name": tool, "arguments": arguments})
        except (Down, Refused) as exc:
            answer = {"result": {"content": [{"type": "text", "text": str(exc)}], "isError": True}}
        latency = time.monotonic() - sent
        result = answer.get("result")
        if not isinstance(result, dict):  # a JSON-RPC error (an unknown tool): as MCP's tool error
            said = (answer.get("error") or {}).get("message", "no result")
            result = {"content": [{"type": "text", "text": str(said)}], "isError": True}
        info = info_of(result)
        reward = float(info.get("reward") or 0.0) if by == "agent" else 0.0
        ended = bool(info.get("done")) and by == "agent"
        if by == "agent":
            self.latencies.append(latency)
            self.reward += reward
            if "episode_return" in info:
                self.episode_return = float(info["episode_return"])
            if ended:
                ended_episode = info.get("ended_episode") or {}
                if "return" in ended_episode:  # real time: the next episode has begun
                    self.episode_return = float(ended_episode["return"])
                self.done = True
                self.end("done")
            elif self.steps >= self.max_steps:
                self.end("step_budget")
        self.writer.record(by, tool, arguments, result, reward, ended, sent - self.started, latency)
        return dict(result)

    def refusal(self) -> str | None:
        """Why a call would not be made now, or None.

        Returns:
            The reason, said as the agent reads it.
        """
        if self.status == "done":
            return "the episode is over (the remote said done); the harness resets the next one"
        if self.status == "step_budget":
            return f"the step budget of {self.max_steps} tool calls is spent"
        if self.status == "time_budget" or time.monotonic() - self.started > self.max_seconds:
            self.end("time_budget")
            return f"the time budget of {self.max_seconds:g} s is spent"
        if self.status is not None:
            return f"the episode ended ({self.status})"
        return None

    def end(self, status: str) -> None:
        """End the episode with ``status`` (the first end wins) and wake the harness.

        Args:
            status: ``"done"``, ``"step_budget"``, ``"time_budget"`` or how the agent ended.
        """
        if self.status is None:
            self.status = status
            with contextlib.suppress(RuntimeError):  # the run is over (an agent left running)
                self.loop.call_soon_threadsafe(self.over.set)


def info_of(result: dict[str, Any]) -> dict[str, Any]:
    """The JSON text of a tool result (its last text content), or {}."""
    for item in reversed(result.get("content") or ()):
        if isinstance(item, dict) and item.get("type") == "text":
            with contextlib.suppress(orjson.JSONDecodeError):
                parsed = orjson.loads(item.get("text", ""))
                return parsed if isinstance(parsed, dict) else {}
            return {}
    return {}


class _RecordingRelay(Relay):
    """The host's MCP server: :class:`Relay`, with each tool call made through its episode."""

    def __init__(self, episode: Episode, write: Any) -> None:
        super().__init__(episode.link, write)
        self.episode = episode

    async def _result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method != "tools/call":
            return await super()._result(method, params)
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return {"error": {"code": -32602, "message": "tools/call takes a name and an arguments object"}}
        try:
            return {"result": await self.episode.acall(name, arguments)}
        except EpisodeOver as exc:
            return {"result": {"content": [{"type": "text", "text": str(exc)}], "isError": True}}


@dataclass(frozen=True)
class Settings:
    """A run's settings (``results.json``'s ``run``)."""

    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    out: Path
    max_steps: int = DEFAULT_MAX_STEPS
    max_seconds: float = DEFAULT_MAX_SECONDS
    mode: str = "realtime"
    agent: str = ""
    #: Seconds an agent gets to stop once its episode is over (:data:`STOP_GRACE`).
    stop_grace: float = STOP_GRACE

    def check(self) -> None:
        if not self.tasks or not self.seeds:
            raise ValueError("eval needs at least one task id and one seed")
        if self.max_steps < 1 or self.max_seconds <= 0:
            raise ValueError(f"the budget must be at least 1 step and above 0 s, not {self.max_steps} "
                             f"steps and {self.max_seconds} s")
        if self.mode not in ("realtime", "lockstep"):
            raise ValueError(f"mode is 'realtime' or 'lockstep', not {self.mode!r}")


async def _reset(episode: Episode) -> None:
    result = await episode.acall("reset", {"seed": episode.seed, "env_id": episode.task}, by="harness")
    if result.get("isError"):
        said = "; ".join(str(c.get("text")) for c in result.get("content") or () if c.get("type") == "text")
        raise RuntimeError(f"the remote refused to reset to {episode.task} seed {episode.seed}: {said}")
    episode.reset_info = info_of(result)
    episode.started = time.monotonic()  # the budget's clock starts with the agent


async def _run_callable(agent: Agent, episode: Episode) -> str | None:
    """Run ``agent(episode)``; the error it raised, if any."""
    if inspect.iscoroutinefunction(agent):
        task: asyncio.Future[Any] = asyncio.ensure_future(agent(episode))
    else:
        task = episode.loop.create_future()

        def body() -> None:
            try:
                agent(episode)
            except BaseException as exc:  # noqa: BLE001 (reported in the results row)
                outcome: BaseException | None = exc
            else:
                outcome = None
            with contextlib.suppress(RuntimeError):  # the run ended without this agent
                episode.loop.call_soon_threadsafe(_settle, task, outcome)

        threading.Thread(target=body, name=f"eval agent {episode.task}/{episode.seed}", daemon=True).start()
    return await _await_agent(task, episode)


def _settle(future: asyncio.Future[Any], exc: BaseException | None) -> None:
    if not future.done():
        if exc is None:
            future.set_result(None)
        else:
            future.set_exception(exc)


async def _await_agent(task: asyncio.Future[Any], episode: Episode) -> str | None:
    """Wait for the agent until it returns, the episode is over or its time is up; then
    :data:`STOP_GRACE` more. The agent's error, if it raised one (not :class:`EpisodeOver`)."""
    over = asyncio.ensure_future(episode.over.wait())
    await asyncio.wait({task, over}, timeout=episode.max_seconds, return_when=asyncio.FIRST_COMPLETED)
    over.cancel()
    if not task.done():
        episode.end("time_budget")
        await asyncio.wait({task}, timeout=episode.stop_grace)
    if not task.done():
        log.warning("the agent of %s seed %s did not stop within %s s of its episode's end: "
                    "left running; its calls are refused", episode.task, episode.seed, episode.stop_grace)
        return None
    exc = task.exception()
    if exc is None or isinstance(exc, EpisodeOver):
        return None
    episode.end("error")
    return f"{type(exc).__name__}: {exc}"


async def _run_command(command: Sequence[str], episode: Episode, socket_path: str) -> str | None:
    """Start the host command for ``episode``; its MCP server's lines come in on
    ``socket_path``. The host's failure, if it failed."""
    relay_argv = [sys.executable, "-m", "universe_remote.pipe", socket_path]
    words = {"{mcp}": shlex.join(relay_argv), "{task}": episode.task, "{env_id}": episode.task,
             "{seed}": str(episode.seed)}
    argv: list[str] = []
    for word in command:
        if word == "{mcp_argv}":
            argv += relay_argv
            continue
        for key, value in words.items():
            word = word.replace(key, value)
        argv.append(word)
    env = {**os.environ, "UNIVERSE_REMOTE_EVAL_MCP": words["{mcp}"],
           "UNIVERSE_REMOTE_EVAL_TASK": episode.task, "UNIVERSE_REMOTE_EVAL_SEED": str(episode.seed)}
    served: set[asyncio.Task[None]] = set()

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        relay = _RecordingRelay(episode, lambda message: writer.write(orjson.dumps(message) + b"\n"))
        with contextlib.suppress(ConnectionError, ValueError):
            while line := await reader.readline():
                if line.strip():
                    relay.received(line)
        for task in list(relay.tasks):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        writer.close()

    def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(connected(reader, writer))
        served.add(task)
        task.add_done_callback(served.discard)

    server = await asyncio.start_unix_server(serve, socket_path, limit=MAX_LINE_BYTES)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=env, start_new_session=True)
    except OSError as exc:
        server.close()
        episode.end("error")
        return f"the agent command could not start: {exc}"
    stderr = asyncio.ensure_future(process.stderr.read()) if process.stderr else None
    try:
        await _await_agent(asyncio.ensure_future(process.wait()), episode)
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the host and the pipe it started
            await process.wait()
    finally:
        server.close()
        for task in list(served):
            task.cancel()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
    said = (await stderr).decode(errors="replace")[-2000:] if stderr is not None else ""
    if process.returncode not in (0, -signal.SIGKILL) and episode.status in (None, "error"):
        episode.end("error")
        return f"the agent command exited with status {process.returncode}: {said.strip()}"
    return None


async def _episode(settings: Settings, agent: Agent | Sequence[str], link: RemoteLink, remote: int,
                   task: str, seed: int, judge: Judge | None, socket_path: str) -> dict[str, Any]:
    writer = TrajectoryWriter(episode_dir(settings.out, task, seed))
    episode = Episode(task, seed, remote, settings.max_steps, settings.max_seconds, settings.stop_grace,
                      writer, link, asyncio.get_running_loop())
    error: str | None = None
    try:
        await _reset(episode)
        if callable(agent):
            error = await _run_callable(agent, episode)
        else:
            error = await _run_command(agent, episode, socket_path)
    except Exception as exc:  # noqa: BLE001 (the row says it; the run goes on)
        error = f"{type(exc).__name__}: {exc}"
        episode.end("error")
    seconds = time.monotonic() - episode.started
    episode.end("agent_stopped")
    final: dict[str, Any] = {}
    if not episode.done and error is None:
        final = info_of(await episode.acall("state", {}, by="harness"))
        if "episode_return" in final:
            episode.episode_return = float(final["episode_return"])
    reward = episode.episode_return if episode.episode_return is not None else episode.reward
    success = episode.done and reward > 0
    if judge is not None and error is None:
        try:
            success = bool(judge(episode, final))
        except Exception as exc:  # noqa: BLE001
            error = f"the judge raised {type(exc).__name__}: {exc}"
    latencies = episode.latencies
    row = {
        "task": task, "seed": seed, "status": episode.status, "success": bool(success),
        "reward": reward, "steps": episode.steps, "seconds": round(seconds, 3),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "latency_max_ms": round(max(latencies) * 1000, 1) if latencies else None,
        "remote": remote, "error": error or "",
    }
    writer.finish(row)
    return row


async def run(settings: Settings, agent: Agent | Sequence[str], urls: Sequence[str],
              judge: Judge | None = None, password: str | None = None) -> list[dict[str, Any]]:
    """Play every (task, seed) on the remotes whose MCP ports are ``urls``, one episode per
    remote at a time; the results rows (also written under ``settings.out``)."""
    settings.check()
    settings.out.mkdir(parents=True, exist_ok=True)
    pending = [(task, seed) for task in settings.tasks for seed in settings.seeds]
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    sockets = tempfile.mkdtemp(prefix="universe-remote-eval-")

    async def worker(index: int, url: str) -> None:
        link = RemoteLink(url, password)
        try:
            while pending:
                task, seed = pending.pop(0)
                rows[task, seed] = await _episode(settings, agent, link, index, task, seed, judge,
                                                  os.path.join(sockets, f"{index}.sock"))
                log.info("eval: %s seed %s: %s", task, seed, rows[task, seed]["status"])
        finally:
            await link.close()

    try:
        await asyncio.gather(*(worker(i, url) for i, url in enumerate(urls)))
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(sockets)
    ordered = [rows[task, seed] for task in settings.tasks for seed in settings.seeds if (task, seed) in rows]
    about = {"tasks": list(settings.tasks), "seeds": list(settings.seeds), "remotes": len(urls),
             "mode": settings.mode, "max_steps": settings.max_steps, "max_seconds": settings.max_seconds,
             "agent": settings.agent}
    write_results(settings.out, about, ordered)
    return ordered


def evaluate(agent: Agent | Sequence[str], tasks: Sequence[str], seeds: Sequence[int],
             out: str | os.PathLike[str], *, remotes: int = 1, mode: str = "realtime",
             max_steps: int = DEFAULT_MAX_STEPS, max_seconds: float = DEFAULT_MAX_SECONDS,
             urls: Sequence[str] | None = None,
             judge: Judge | None = None, games_per_process: int | None = None,
             password: str | None = None, stop_grace: float = STOP_GRACE) -> list[dict[str, Any]]:
    """Run ``agent`` (a callable, or a host command's argv) over ``tasks`` x ``seeds``; the
    results rows. Without ``urls`` (running remotes' MCP ports) it starts ``remotes`` local
    remotes of ``tasks[0]`` in ``mode`` and stops them after.

    Args:
        agent: ``agent(episode)``, or an MCP host's command line (a string or argv) with
            ``{mcp}`` where its server's command goes.
        tasks: env ids, each played with every seed.
        seeds: the seeds.
        out: the directory the trajectories and results go to.
        remotes: local remotes to start (without ``urls``).
        mode: ``"realtime"`` or ``"lockstep"``.
        max_steps: tool calls an episode may make.
        max_seconds: seconds an episode may last.
        urls: the MCP URLs of running remotes, instead of starting them.
        judge: ``judge(episode, info)`` decides success instead of the remote.
        games_per_process: remotes each local ``serve`` runs.
        password: the remotes' password.
        stop_grace: seconds an agent gets to stop once its episode is over.

    Returns:
        One results row per (task, seed) played (also in ``out``).

    Raises:
        ValueError: bad settings (``remotes`` out of range, no tasks or seeds...).
    """
    if isinstance(agent, str):
        agent = shlex.split(agent)
    name = getattr(agent, "__qualname__", repr(agent)) if callable(agent) else shlex.join(agent)
    settings = Settings(tuple(tasks), tuple(seeds), Path(out), max_steps, max_seconds, mode, name, stop_grace)
    settings.check()
    if urls is not None:
        return asyncio.run(run(settings, agent, urls, judge, password))
    if not 1 <= remotes <= MAX_REMOTES:
        raise ValueError(f"remotes must be 1..{MAX_REMOTES}, not {remotes}")
    from remotes import start_local

    extra = ["--mcp-port", "0", *(["--mode", "lockstep"] if mode == "lockstep" else [])]
    with start_local(tasks[0], remotes, extra_args=extra, start_timeout=START_TIMEOUT,
                     games_per_process=games_per_process, password=password) as group:
        started = [f"http://{a.host}:{port}/mcp"
                   for a, port in zip(group.addresses, group.mcp_ports, strict=True)]
        return asyncio.run(run(settings, agent, started, judge, password))


# The command ---------------------------------------------------------------------------------


def parse_seeds(text: str) -> tuple[int, ...]:
    """``0-4`` or ``0,3,7`` (or both: ``0-2,9``).

    Args:
        text: the ``--seeds`` value.

    Returns:
        The seeds, in order.

    Raises:
        ValueError: ``text`` is not that form, or names no seed.
    """
    seeds: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.strip().partition("-")
            seeds += range(int(low), int(high or low) + 1)
    except ValueError:
        raise ValueError(f"seeds are N, N-M or a comma list of them (0-4, 0,3,7), not {text!r}") from None
    if not seeds:
        raise ValueError(f"no seeds in {text!r}")
    return tuple(seeds)


def load_agent(spec: str) -> Agent:
    """``module:function`` -> the callable.

    Args:
        spec: ``module:function``.

    Returns:
        The function.

    Raises:
        ValueError: not that form, or the module has no such callable.
    """
    import importlib

    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"--agent is MODULE:FUNCTION (benchmarks.eval_agent:scripted), not {spec!r}")
    found = getattr(importlib.import_module(module), name, None)
    if not callable(found):
        raise ValueError(f"{module} has no callable {name!r}")
    return found  # type: ignore[no-any-return]


def _cmd_eval(args: Any) -> int:
    from runtimes import registry

    try:
        seeds = parse_seeds(args.seeds)
        for task in args.tasks:
            registry.check(task)
        agent: Agent | list[str] = (load_agent(args.agent) if args.agent else shlex.split(args.agent_command))
    except (ValueError, ImportError, LookupError) as exc:
        print(f"universe-remote eval: {exc}", file=sys.stderr)
        return 2
    rows = evaluate(agent, args.tasks, seeds, args.out, remotes=args.remotes, mode=args.mode,
                    max_steps=args.max_steps, max_seconds=args.max_seconds,
                    urls=args.url or None, password=args.password,
                    games_per_process=args.games_per_process)
    won = sum(row["success"] for row in rows)
    latencies = [row["latency_p50_ms"] for row in rows if row["latency_p50_ms"] is not None]
    print(f"eval: {won}/{len(rows)} episodes succeeded; median per-call latency "
          f"{statistics.median(latencies) if latencies else float('nan'):.0f} ms; results in "
          f"{Path(args.out) / 'results.csv'}, trajectories under {Path(args.out) / 'trajectories'}")
    return 0


def add_commands(sub: Any) -> None:
    what = ("run an agent (a Python callable or an MCP host command) over task ids x seeds on local "
            "remotes through their MCP tools, with a per-episode budget; write a results table and "
            "every episode's trajectory (docs/computer-use.md)")
    parser = sub.add_parser("eval", help=what, description=what[0].upper() + what[1:] + ".")
    parser.add_argument("tasks", nargs="+", metavar="TASK",
                        help="env ids (miniwob.ClickButton-v0, x11.XCalc-v0)")
    parser.add_argument("--seeds", default="0", help="seeds: N, N-M or a comma list (default 0)")
    agent = parser.add_mutually_exclusive_group(required=True)
    agent.add_argument("--agent", metavar="MODULE:FUNCTION", help="a callable agent(episode)")
    agent.add_argument("--agent-command", metavar="COMMAND",
                       help="an MCP host command; {mcp} is its MCP server's command line "
                       "({mcp_argv} as separate words), {task}, {seed} too")
    parser.add_argument("--out", required=True, metavar="DIR", help="where results and trajectories go")
    parser.add_argument("--remotes", type=int, default=1, metavar="N", help="remotes to start (default 1)")
    parser.add_argument("--games-per-process", type=int, default=None, metavar="K",
                        help="remotes one serve process runs (default: start_local's choice)")
    parser.add_argument("--mode", choices=("realtime", "lockstep"), default="realtime",
                        help="the remotes' mode (default realtime; lockstep: each action a step)")
    parser.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEPS,
                        help=f"tool calls per episode (default {DEFAULT_MAX_STEPS})")
    parser.add_argument("--max-seconds", type=float, default=DEFAULT_MAX_SECONDS,
                        help=f"seconds per episode (default {DEFAULT_MAX_SECONDS:g})")
    parser.add_argument("--url", action="append", default=[], metavar="URL",
                        help="a running remote's MCP port instead of starting remotes (repeatable)")
    parser.add_argument("--password", default=None, help="the remotes' password")
    parser.set_defaults(func=_cmd_eval)
