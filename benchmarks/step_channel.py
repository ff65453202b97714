"""A lockstep step's transport, the alternatives measured side by side: async vs blocking, TCP vs Unix.

One run, every row once per round, the rows' order rotated each round, :data:`ROUNDS`
rounds; the median round of each row is printed (the machine has 2 cores and may be
shared). Only the rewarder round trip is measured: each step is ``v0.env.step`` of
:data:`FRAMESKIP` frames with no events, ``obs="shm"`` (what a local lockstep env asks
for: the remote writes the frame into shared memory; nobody reads it here: the frame
read is :mod:`benchmarks.atari_breakdown`'s).

**Against a real local remote** (``remotes.start_local``: ``atari.Pong-v0``, and
``builtin.Catch-v0`` whose runtime costs next to nothing, so the transport is most of a
step), steps/s and the agent's CPU per step (``time.process_time`` over the loop: every
thread of this process, the loop thread's included; the resets between episodes are
taken out of both):

- (a) the previous design's transport: the async :class:`rewarder.client.RewarderClient`
  stepping on a :class:`remotes.loop.LoopThread` through ``LoopThread.run``
  (``run_coroutine_threadsafe``: a hand-off to the loop thread and back per step). The
  inline mode the previous design used for lockstep steps (``run(..., inline=True)``: the
  caller's thread borrows the loop) no longer exists in ``remotes.loop``;
- (a0) that inline mode as it was shipped: commit 64f4489's ``remotes/loop.py``, read
  from this repository's history with ``git show`` (skipped when there is no git
  history), the same async client on it;
- (b) the new design's: :class:`rewarder.blocking.BlockingRewarder` (websockets'
  sans-I/O ``ClientProtocol`` over a plain blocking TCP socket) in the caller's thread,
  kept on TCP with ``local=False``;
- (c) the same over the remote's Unix twin (:mod:`rewarder.local_socket`): what a local
  agent's channel dials by default.

**Against a minimal server** (a websockets asyncio server in a process of its own that
answers each request at once with a canned reply of a real Pong reply's size), the same
sans-I/O client over each transport: (b') TCP on 127.0.0.1 (``serve``) and (c) a Unix
socket (``unix_serve``). The server and the client code are the same on both, so
(b') vs (c) isolates what TCP loopback costs over a Unix socket: the saving is printed
in microseconds of agent CPU per step (and the server's, read from /proc) and of
round-trip time (step wall time, and ``v0.control.ping``'s). The Unix client is
:class:`BlockingRewarder` with only its dial replaced (:class:`UnixBlockingRewarder`).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

from benchmarks.common import process_cpu, quick, ratio, table
from remotes.loop import LoopThread
from rewarder.blocking import BlockingRewarder
from rewarder.client import RewarderClient
from rewarder.protocol import OBS_SHM

#: Rounds; every row runs once per round, in a rotated order.
ROUNDS: Final = quick(5, 1)
#: Timed steps per row per round against a real remote (or REMOTE_SECONDS), after WARMUP.
REMOTE_STEPS: Final = quick(1500, 300)
REMOTE_SECONDS: Final = quick(8.0, 2.0)
#: Timed steps per row per round against the minimal server (or MINIMAL_SECONDS).
MINIMAL_STEPS: Final = quick(4000, 800)
MINIMAL_SECONDS: Final = quick(5.0, 1.0)
WARMUP: Final = 100
#: v0.control.ping round trips per row per round (the minimal server's table).
PINGS: Final = quick(500, 100)
FRAMESKIP: Final = 4
ENV_IDS: Final = ("atari.Pong-v0", "builtin.Catch-v0")
#: The commit whose LoopThread had the inline mode (row a0).
INLINE_COMMIT: Final = "64f4489"
#: One client id for every client of this run: each new client takes the remote's active
#: slot from the last one at once instead of waiting until the remote saw it go.
CLIENT_ID: Final = f"step-channel-benchmark-{os.getpid()}"


# Measuring -------------------------------------------------------------------------------


def _drive(
    step: Callable[[], bool], reset: Callable[[], None], steps: int, seconds: float
) -> dict[str, float]:
    """``step()`` (True: the episode ended) WARMUP times, then ``steps`` timed (or for
    ``seconds``); wall and process CPU over the loop, less the resets' share."""
    for _ in range(WARMUP):
        if step():
            reset()
    done = 0
    reset_wall = reset_cpu = 0.0
    deadline = time.perf_counter() + seconds
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while done < steps and time.perf_counter() < deadline:
        if step():
            r0, c0 = time.perf_counter(), time.process_time()
            reset()
            reset_wall += time.perf_counter() - r0
            reset_cpu += time.process_time() - c0
        done += 1
    wall = time.perf_counter() - wall0 - reset_wall
    cpu = time.process_time() - cpu0 - reset_cpu
    return {"steps": done, "steps_per_s": done / wall, "wall": wall / done, "cpu": cpu / done}


def _blocking_run(
    client: BlockingRewarder, steps: int, seconds: float, unix: bool = False,
) -> dict[str, float]:
    """Connect ``client``, step it (lockstep), close it. ``unix``: it must have taken the
    remote's Unix twin (else TCP: the row would measure something else)."""
    client.connect()
    try:
        if client.over_unix is not unix:
            raise RuntimeError(f"{client.name}: over_unix is {client.over_unix}, expected {unix}")
        def reset() -> None:
            episode = client.reset(seed=0, mode="lockstep")
            client.wait_for_state("running", episode, 30.0)

        def step() -> bool:
            return client.step((), FRAMESKIP, OBS_SHM).done

        reset()
        return _drive(step, reset, steps, seconds)
    finally:
        client.close()


def _async_run(loop: Any, address: str, steps: int, seconds: float) -> dict[str, float]:
    """The async client on ``loop`` (a LoopThread, old or new), every call through
    ``loop.run`` (with the old LoopThread: inline)."""
    inline = getattr(loop, "_run_inline", None) is not None
    run: Callable[[Any], Any] = (
        (lambda coro: loop.run(coro, None, True)) if inline else (lambda coro: loop.run(coro))
    )

    async def make() -> RewarderClient:
        client = RewarderClient(address, reconnect=False, client_id=CLIENT_ID)
        await client.start()
        return client

    async def do_reset(client: RewarderClient) -> None:
        episode = await client.reset(seed=0, mode="lockstep")
        await client.wait_for_state("running", episode_id=episode)

    client = run(make())
    try:
        run(do_reset(client))
        return _drive(
            lambda: run(client.step((), FRAMESKIP, obs=OBS_SHM)).done,
            lambda: run(do_reset(client)),
            steps, seconds,
        )
    finally:
        run(client.close())


def _old_loop_module() -> types.ModuleType | None:
    """Commit INLINE_COMMIT's remotes/loop.py as a module, or None (no git history)."""
    root = Path(__file__).resolve().parent.parent
    try:
        source = subprocess.run(
            ["git", "-C", str(root), "show", f"{INLINE_COMMIT}:remotes/loop.py"],
            check=True, capture_output=True, text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType(f"benchmarks._loop_{INLINE_COMMIT}")
    sys.modules[module.__name__] = module  # dataclasses and typing look modules up
    exec(compile(source, f"{INLINE_COMMIT}:remotes/loop.py", "exec"), module.__dict__)
    return module


# The minimal server ----------------------------------------------------------------------


def _canned_body() -> dict[str, Any]:
    """A step reply's body as a local Pong remote sends it (same keys, same size)."""
    return {
        "reward": 0.0, "done": False, "info": {"lives": 0, "frame": 4, "remote.frame": 5},
        "frame": 5, "shm": ["universe-remote-frame-12345-0123456789abcdef", 210, 160],
    }


async def _minimal_serve(unix_path: str, pipe: Connection) -> None:
    from websockets.asyncio.server import ServerConnection as WSConnection, serve, unix_serve

    from rewarder.connections import ServerConnection
    from rewarder.protocol import PingRequest, ResetRequest, StepRequest

    body = _canned_body()
    describe = {"env_id": "minimal", "env_state": "running", "fps": 60.0}

    async def handler(ws: WSConnection) -> None:
        proto = ServerConnection()
        episode = 1
        await ws.send(proto.describe(episode, describe), text=True)
        async for message in ws:
            request = proto.receive(message)
            if isinstance(request, StepRequest):
                reply = proto.reply_step(request.message_id, episode, body, 0.0)
            elif isinstance(request, PingRequest):
                reply = proto.reply_ping(request.message_id, 0.0)
            elif isinstance(request, ResetRequest):
                episode += 1
                reply = proto.reply_reset(request.message_id, episode, 0.0)
            else:
                reply = proto.reply_error(request.message_id, "not in the minimal server")
            await ws.send(reply, text=True)

    options: dict[str, Any] = {"compression": None, "ping_interval": None}  # as the remote: no compression
    async with serve(handler, "127.0.0.1", 0, **options) as tcp, unix_serve(handler, unix_path, **options):
        pipe.send(tcp.sockets[0].getsockname()[1])
        await asyncio.get_running_loop().run_in_executor(None, pipe.recv)  # until told to stop


def _minimal_server(unix_path: str, pipe: Connection) -> None:
    asyncio.run(_minimal_serve(unix_path, pipe))


@contextlib.contextmanager
def minimal_server() -> Iterator[tuple[int, str, int]]:
    """The minimal server in a process of its own: (TCP port on 127.0.0.1, Unix socket
    path, its pid)."""
    folder = tempfile.mkdtemp(prefix="step-channel-")
    path = os.path.join(folder, "rewarder.sock")
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=_minimal_server, args=(path, theirs), daemon=True
    )
    process.start()
    try:
        if not ours.poll(30):
            raise RuntimeError("the minimal server did not start")
        assert process.pid is not None
        yield ours.recv(), path, process.pid
    finally:
        with contextlib.suppress(OSError):
            ours.send("stop")
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.rmdir(folder)


class UnixBlockingRewarder(BlockingRewarder):
    """:class:`BlockingRewarder` dialling a Unix socket: only ``_attempt`` differs (no TCP,
    no TLS); sending, reading and parsing are the parent's, so a step costs the same
    Python and differs only in the kernel's path. Leans on the parent's private fields:
    a benchmark's stand-in, not an API."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        super().__init__("127.0.0.1:1", **kwargs)
        self.path = path
        self.url = "ws://localhost/"

    def _attempt(self, timeout: float) -> None:
        from websockets.uri import parse_uri

        deadline = time.monotonic() + timeout
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(self.path)
            self._handshake(sock, parse_uri(self.url), deadline)
        except BaseException:
            self._abort()
            raise
        sock.settimeout(None)


def _minimal_run(client: BlockingRewarder, server_pid: int) -> dict[str, float]:
    """Step ``client`` against the minimal server, then ping it; figures per step (the
    server's CPU per step too)."""
    client.connect()
    try:
        server0 = process_cpu(server_pid)
        result = _drive(lambda: client.step((), FRAMESKIP, OBS_SHM).done, lambda: None,
                        MINIMAL_STEPS, MINIMAL_SECONDS)
        result["server_cpu"] = (process_cpu(server_pid) - server0) / (result["steps"] + WARMUP)
        result["ping"] = statistics.median(client.ping() for _ in range(PINGS))
        return result
    finally:
        client.close()


# Main ------------------------------------------------------------------------------------


def _median_round(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds."""
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def _rotated(rows: list[str], round_index: int) -> list[str]:
    k = round_index % len(rows)
    return rows[k:] + rows[:k]


def measure_remote(env_id: str, old_loop: types.ModuleType | None) -> dict[str, list[dict[str, float]]]:
    """Rows a, a0 (with ``old_loop``) and b against one local remote of ``env_id``."""
    from remotes import start_local

    loop = LoopThread(name="step-channel-loop")
    inline_loop = old_loop.LoopThread(name="step-channel-inline-loop") if old_loop else None
    rows = ["a", "a0", "b", "c"] if inline_loop is not None else ["a", "b", "c"]
    results: dict[str, list[dict[str, float]]] = {row: [] for row in rows}
    try:
        with start_local(env_id) as remotes:
            address = f"127.0.0.1:{remotes.addresses[0].rewarder_port}"
            for i in range(ROUNDS):
                for row in _rotated(rows, i):
                    if row == "a":
                        result = _async_run(loop, address, REMOTE_STEPS, REMOTE_SECONDS)
                    elif row == "a0":
                        result = _async_run(inline_loop, address, REMOTE_STEPS, REMOTE_SECONDS)
                    else:  # (b) TCP; (c) the remote's Unix twin, what a local agent dials
                        result = _blocking_run(
                            BlockingRewarder(address, client_id=CLIENT_ID, local=row == "c"),
                            REMOTE_STEPS, REMOTE_SECONDS, unix=row == "c",
                        )
                    results[row].append(result)
    finally:
        loop.close()
        if inline_loop is not None:
            inline_loop.close()
    return results


def measure_minimal() -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {"tcp": [], "unix": []}
    with minimal_server() as (port, path, pid):
        for i in range(ROUNDS):
            for row in _rotated(["tcp", "unix"], i):
                client = (BlockingRewarder(f"127.0.0.1:{port}") if row == "tcp"
                          else UnixBlockingRewarder(path))
                results[row].append(_minimal_run(client, pid))
    return results


LABELS: Final = {
    "a": "(a) old: async RewarderClient, LoopThread.run (hand-off)",
    "a0": f"(a0) old as shipped: {INLINE_COMMIT} LoopThread.run(inline=True)",
    "b": "(b) BlockingRewarder, caller's thread, TCP (local=False)",
    "c": "(c) new: BlockingRewarder over the remote's Unix twin",
}


def print_remote(env_id: str, results: dict[str, list[dict[str, float]]]) -> None:
    med = {row: _median_round(runs) for row, runs in results.items()}
    b = med["b"]
    rows = []
    for row, m in med.items():
        rates = [r["steps_per_s"] for r in results[row]]
        rows.append([
            LABELS[row], f"{m['steps_per_s']:,.0f}", f"{min(rates):,.0f}-{max(rates):,.0f}",
            f"{m['wall'] * 1e6:.0f}", f"{m['cpu'] * 1e6:.0f}",
            ratio(b["steps_per_s"], m["steps_per_s"]), ratio(m["cpu"], b["cpu"]),
        ])
    print(f"\n  {env_id}, local remote: v0.env.step of {FRAMESKIP} frames, obs=shm (not read), "
          f"{REMOTE_STEPS} steps per row per round after {WARMUP}, median of {ROUNDS} rounds")
    table(["row", "steps/s", "rounds", "wall us/step", "agent CPU us/step",
           "(b) steps/s / row", "row CPU / (b)"], rows)
    if "c" in med:
        c = med["c"]
        print(f"  (c) vs (b): {ratio(c['steps_per_s'], b['steps_per_s'])} steps/s; agent CPU "
              f"{c['cpu'] * 1e6:.0f} vs {b['cpu'] * 1e6:.0f} us a step "
              f"({(b['cpu'] - c['cpu']) * 1e6:+.0f} us saved); wall {c['wall'] * 1e6:.0f} vs "
              f"{b['wall'] * 1e6:.0f} us a step")
    for old in ("a", "a0"):
        if old not in med:
            continue
        o = med[old]
        saved = (o["cpu"] - b["cpu"]) * 1e6
        print(f"  (b) vs ({old}): {ratio(b['steps_per_s'], o['steps_per_s'])} steps/s; agent CPU "
              f"{b['cpu'] * 1e6:.0f} vs {o['cpu'] * 1e6:.0f} us a step ({saved:+.0f} us saved, "
              f"{ratio(o['cpu'], b['cpu'])}); wall {b['wall'] * 1e6:.0f} vs {o['wall'] * 1e6:.0f} us a step")


def print_minimal(results: dict[str, list[dict[str, float]]]) -> None:
    tcp, unix = _median_round(results["tcp"]), _median_round(results["unix"])
    print(f"\n  Minimal server (websockets asyncio, canned replies, own process): the same "
          f"sans-I/O client, {MINIMAL_STEPS} steps + {PINGS} pings per row per round, "
          f"median of {ROUNDS} rounds")
    table(
        ["row", "steps/s", "step round trip us", "agent CPU us/step", "server CPU us/step",
         "ping round trip us"],
        [
            [label, f"{m['steps_per_s']:,.0f}", f"{m['wall'] * 1e6:.1f}", f"{m['cpu'] * 1e6:.1f}",
             f"{m['server_cpu'] * 1e6:.0f}", f"{m['ping'] * 1e6:.1f}"]
            for label, m in (("(b') BlockingRewarder over TCP 127.0.0.1", tcp),
                             ("(c) the same over a Unix socket (unix_serve)", unix))
        ],
    )
    print(f"  Unix socket vs TCP loopback: {ratio(unix['steps_per_s'], tcp['steps_per_s'])} "
          f"steps/s; saves {(tcp['cpu'] - unix['cpu']) * 1e6:.1f} us of agent CPU a step "
          f"({ratio(tcp['cpu'], unix['cpu'])}) and {(tcp['server_cpu'] - unix['server_cpu']) * 1e6:.0f} us "
          f"of the server's, {(tcp['wall'] - unix['wall']) * 1e6:.1f} us of step round trip, "
          f"{(tcp['ping'] - unix['ping']) * 1e6:.1f} us of ping round trip\n  (server CPU: read from "
          "/proc in clock ticks over the row, its pings left out)")


def main() -> None:
    print(f"  {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start; "
          f"rows alternate within each round")
    print("  (a) runs on today's LoopThread.run: its inline mode (run(..., inline=True), the previous "
          "design's lockstep path) no longer exists in remotes.loop;\n  (a0) is that mode as "
          f"{INLINE_COMMIT} shipped it, its remotes/loop.py read from git history")
    old_loop = _old_loop_module()
    if old_loop is None:
        print(f"  (no git history here: row (a0), {INLINE_COMMIT}'s inline LoopThread, is skipped)")
    for env_id in ENV_IDS:
        print_remote(env_id, measure_remote(env_id, old_loop))
    print_minimal(measure_minimal())
    print(f"  load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
