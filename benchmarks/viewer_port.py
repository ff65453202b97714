"""Viewer port: the rewarder's ping round trip, pipelined pings/s and CPU with a browser watcher.

Does serving the browser viewer (:mod:`envserver.viewer`, ``serve ... --http-port``) slow
the rewarder? The viewer's bridge shares the remote's event loop with the rewarder and
the game loop, so a watcher could delay the agent's messages. Each scenario is a fresh
remote process on 127.0.0.1 serving one env, with the agent's rewarder connection in
this process and at most one watcher in its own process:

* **no watcher**: ``universe-remote serve ENV``; the peer of every other scenario.
* **VNC direct**: the same remote, a watcher on its VNC port.
* **in-process bridge, own port**: the viewer on its own port given the remote's VNC
  server (``Viewer(vnc_server=...)``, what ``serve ENV --http-port`` ships): the watcher's
  WebSocket at ``/viewer/websockify`` is a client of the VNC server attached in-process
  (:meth:`vncdriver.server.VNCServer.attach`), no TCP hop, its messages parsed once.
* **TCP bridge, own port**: the same viewer without ``vnc_server``, as it was before the
  in-process path and as it still is for runtimes that serve VNC themselves (Xvnc): its
  bridge dials the VNC port over loopback TCP and frames the browser's messages again.
* (A bridge on the rewarder's own port, as Universe had it, was measured here as a
  prototype in an earlier wave and refused: benchmarks/RESULTS.md. It hooked into the
  websockets asyncio server the rewarder no longer uses, so it is gone.)

A last section repeats VNC direct and the two bridges on Enduro x4 with a **Raw
watcher** (:data:`RAW_ENV`; a recorder or a lossless client on loopback asks for Raw):
megabytes per second instead of kilobytes go through the bridge, so what the bridge
itself costs per byte shows in the remote's CPU (no pings in those runs).

The two bridge scenarios run :func:`_serve_viewer` (a subprocess building the remote and
its viewer with or without ``vnc_server``), so each measures the path it names whatever
``serve`` wires.

The watcher is noVNC-like: Tight with JPEG quality 6 and compression level 2, one
incremental update request after each update (:func:`_watch`). Per run, after the watcher
saw its first update and :data:`SETTLE_SECONDS`:

1. **Remote CPU**: the remote process's on-CPU time (``/proc/<pid>/task/*/schedstat``,
   nanoseconds) per wall second over :data:`CPU_SECONDS` with no rewarder traffic: what
   the game loop, the VNC encoding and the bridge cost.
2. **Ping round trip**: :data:`PING_SAMPLES` sequential ``v0.control.ping`` as the
   active agent (after :data:`PING_WARMUP`), each after a random pause, so that pings
   land at any moment of the remote's frame work as an agent's messages do: median,
   mean and p99. (Back to back, ~160 pings fit in a frame and only the one that meets
   the frame's work waits, ~0.6%: the p99 then flips between the fast and the delayed
   pings from one run to the next on the same remote.)
3. **Pipelined pings/s**: :data:`PIPELINED` pings with up to :data:`WINDOW` in flight.
4. **Game fps** over the run (the describe frame counter; the limit is the env's fps),
   and the watcher's updates/s (limit: fps) and KB/s.

Every measure is shown as the median of :data:`ROUNDS` rounds (min..max), with its
ratio to the "no watcher" peer; a last table puts the questions side by side
(in-process bridge vs VNC direct and vs the TCP bridge, rewarder port vs own port).
Rounds interleave the scenarios, in a rotated order, so drift in the machine's load
hits all of them. The machine has 2 cores and may be shared: pipelined pings/s swings
most with other load; the remote's CPU time is the steadiest figure. Every figure is what this run measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from websockets.asyncio.client import connect as ws_connect  # noqa: E402

from benchmarks.common import (
    quick,  # noqa: E402
    ratio as _ratio,
    schedstat_cpu,
    table as _table,
)
from remotes.capacity import machine_ticks as _machine_ticks  # noqa: E402
from rewarder import connections, protocol  # noqa: E402
from rewarder.auth import PASSWORD_ENV, PASSWORD_FILE_ENV, VIEW_ONLY_PASSWORD_ENV  # noqa: E402
from rewarder.protocol import OBSERVER_HEADER  # noqa: E402

#: (env id, --scale): Catch draws little; Enduro at 4x (640x840) makes the watcher's
#: encoding and the bridge's copying heavy (40-50 KB/s of Tight JPEG).
ENVS: Final = quick((("builtin.Catch-v0", 1), ("atari.Enduro-v0", 4)), (("builtin.Catch-v0", 1),))
#: Rounds; each runs every scenario once per env, and the Raw section once (about 45-60 s
#: a round on 2 cores).
ROUNDS: Final = quick(3, 1)
#: Seconds after the watcher's first update before measuring (warm-up, not a handshake).
SETTLE_SECONDS: Final = 0.3
#: Wall seconds of the remote-CPU window (no rewarder traffic meanwhile).
CPU_SECONDS: Final = quick(1.0, 0.5)
#: Sequential pings: untimed back to back, then timed, each after a random pause of up
#: to PING_PAUSE seconds (asyncio sleeps whole milliseconds here: ~1.2 ms a ping).
PING_WARMUP: Final = 100
PING_SAMPLES: Final = quick(1000, 200)
PING_PAUSE: Final = 0.001
#: Pipelined pings, and how many may be in flight (the server queues 1024 per client).
PIPELINED: Final = quick(15_000, 3_000)
WINDOW: Final = 256
#: The viewer's bridge path.
BRIDGE_PATH: Final = "/viewer/websockify"
#: Bytes per read in the watcher (the shipped bridge's chunk).
CHUNK: Final = 256 * 1024
#: Seconds a remote may take to print its address, a watcher its first update, and a
#: stopping process to exit after SIGTERM (then it is killed).
START_TIMEOUT: Final = 20.0
STOP_TIMEOUT: Final = 5.0
#: Rounds that would start after this many seconds are skipped (and the output says so).
BUDGET_SECONDS: Final = 200.0

#: The project's root: children run ``-m benchmarks.viewer_port`` and ``-m universe_remote`` there.
_ROOT: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ADDRESS = re.compile(r"agent address\s+vnc://[^:\s]+:(?P<vnc>\d+)\+(?P<rewarder>\d+)")
_VIEWER = re.compile(r"viewer\s+http://[^:\s]+:(?P<http>\d+)/viewer/")


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    #: Which remote: "serve" (the real CLI), "in-process" / "tcp" (:func:`_serve_viewer`:
    #: a viewer with / without ``vnc_server``).
    remote: str
    #: Where the watcher connects: None (no watcher), "vnc" or "viewer".
    watch: str | None


NONE = Scenario("none", "no watcher", "serve", None)
DIRECT = Scenario("vnc", "watcher on VNC directly", "serve", "vnc")
BRIDGE = Scenario("bridge", "watcher via in-process bridge, own port", "in-process", "viewer")
TCP_BRIDGE = Scenario("tcp", "watcher via TCP bridge, own port (before)", "tcp", "viewer")
SCENARIOS: Final = (NONE, DIRECT, BRIDGE, TCP_BRIDGE)
#: The Raw section: its env (a big screen whose road moves every frame) and scenarios.
RAW_ENV: Final = ("atari.Enduro-v0", 4)
RAW_SCENARIOS: Final = (DIRECT, BRIDGE, TCP_BRIDGE)


# /proc readings ------------------------------------------------------------------------


def _busy_since(start: tuple[int, int]) -> float:
    busy, total = _machine_ticks()
    return (busy - start[0]) / (total - start[1]) if total > start[1] else 0.0


# Child processes ----------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    """Our environment without the remote passwords (every run here is on loopback)."""
    drop = {PASSWORD_ENV, PASSWORD_FILE_ENV, VIEW_ONLY_PASSWORD_ENV}
    return {k: v for k, v in os.environ.items() if k not in drop} | {"OPENBLAS_NUM_THREADS": "1"}


@contextlib.contextmanager
def _child(command: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A subprocess with piped stdout, always stopped: SIGTERM, then SIGKILL."""
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=stderr, env=_child_env(), cwd=_ROOT)
        try:
            yield proc
        except BaseException:
            if proc.poll() is not None:  # it died first: say why
                stderr.seek(0)
                tail = stderr.read()[-1500:].decode(errors="replace")
                print(f"  {command[2:5]} exited ({proc.returncode}):\n{tail}", file=sys.stderr)
            raise
        finally:
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> bytes:
    """SIGTERM ``proc`` (SIGKILL after STOP_TIMEOUT); what it wrote to stdout meanwhile."""
    if proc.poll() is None:
        proc.terminate()
    try:
        out, _ = proc.communicate(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out or b""


def _read_until(
    proc: subprocess.Popen[bytes], pattern: re.Pattern[str], what: str
) -> re.Match[str]:
    """Read ``proc``'s stdout until ``pattern`` matches (within START_TIMEOUT)."""
    assert proc.stdout is not None
    fd, text = proc.stdout.fileno(), ""
    deadline = time.monotonic() + START_TIMEOUT
    while not (match := pattern.search(text)):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError(f"{what}: nothing within {START_TIMEOUT:g} s; got {text!r}")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError(f"{what} exited ({proc.wait()}) before it was ready; got {text!r}")
        text += chunk.decode(errors="replace")
    return match


def _remote_command(scenario: Scenario, env_id: str, scale: int) -> list[str]:
    if scenario.remote in ("in-process", "tcp"):
        return [sys.executable, "-m", "benchmarks.viewer_port", "--remote", scenario.remote,
                env_id, str(scale)]
    command = [sys.executable, "-m", "universe_remote", "serve", env_id, "--host", "127.0.0.1",
               "--rewarder-port", "0", "--vnc-port", "0"]
    if scale != 1:
        command += ["--scale", str(scale)]
    return command


def _watch_target(scenario: Scenario, ports: dict[str, int]) -> str:
    if scenario.watch == "vnc":
        return f"tcp:{ports['vnc']}"
    return f"ws://127.0.0.1:{ports['http']}{BRIDGE_PATH}"


# The agent's side: pings and the frame counter ------------------------------------------


async def _frame_counter(port: int) -> tuple[int, float, float]:
    """The remote's frame counter (and fps) from the describe an observer gets on connecting."""
    conn = connections.ClientConnection()
    async with ws_connect(f"ws://127.0.0.1:{port}", compression=None,
                          additional_headers={OBSERVER_HEADER: "true"}) as ws:
        while True:
            event = conn.receive(await ws.recv())
            if isinstance(event, protocol.Describe):
                return int(event.body["frame"]), time.perf_counter(), event.fps


async def _pings(port: int) -> dict[str, float]:
    """As the active agent: paced sequential round trips, then pipelined pings per second."""
    conn = connections.ClientConnection()
    async with ws_connect(f"ws://127.0.0.1:{port}", compression=None) as ws:

        async def ping() -> None:
            await ws.send(conn.ping()[1], text=True)

        async def reply() -> None:
            while not isinstance(conn.receive(await ws.recv()), protocol.PingReply):
                pass  # the describe on connecting, rewards the game broadcasts

        rng = random.Random(0)
        rtts = []
        for i in range(PING_WARMUP + PING_SAMPLES):
            if i >= PING_WARMUP:  # each timed ping at a random phase of the remote's frames
                await asyncio.sleep(rng.uniform(0, PING_PAUSE))
            sent = time.perf_counter()
            await ping()
            await reply()
            if i >= PING_WARMUP:
                rtts.append(time.perf_counter() - sent)

        window = asyncio.Semaphore(WINDOW)

        async def sender() -> None:
            for _ in range(PIPELINED):
                await window.acquire()
                await ping()

        started = time.perf_counter()
        sending = asyncio.create_task(sender())
        try:
            for _ in range(PIPELINED):
                await reply()
                window.release()
            await sending
        finally:
            sending.cancel()
        pipelined = PIPELINED / (time.perf_counter() - started)
    rtts.sort()
    return {
        "rtt_p50": statistics.median(rtts),
        "rtt_mean": statistics.fmean(rtts),
        "rtt_p99": rtts[int(0.99 * len(rtts))],
        "pipelined": pipelined,
    }


async def _agent_measures(pid: int, port: int, pings: bool = True) -> dict[str, float]:
    frame0, t0, fps = await _frame_counter(port)
    cpu0, w0 = schedstat_cpu(pid), time.perf_counter()
    await asyncio.sleep(CPU_SECONDS)
    cpu = (schedstat_cpu(pid) - cpu0) / (time.perf_counter() - w0)
    rtts = await _pings(port) if pings else {}
    frame1, t1, _ = await _frame_counter(port)
    return {"cpu": cpu, "fps": (frame1 - frame0) / (t1 - t0), "fps_limit": fps, **rtts}


def measure(scenario: Scenario, env_id: str, scale: int, raw: bool = False) -> dict[str, float]:
    """One run: a fresh remote (and watcher) for ``scenario``; what the agent measured.
    ``raw``: the watcher asks for Raw, and the agent sends no pings."""
    with contextlib.ExitStack() as stack:  # stops the watcher, then the remote
        remote = stack.enter_context(_child(_remote_command(scenario, env_id, scale)))
        address = _read_until(remote, _ADDRESS, f"remote ({scenario.key})")
        ports = {k: int(v) for k, v in address.groupdict().items()}
        if viewer := _VIEWER.search(address.string):
            ports["http"] = int(viewer["http"])
        watcher = None
        if scenario.watch is not None:
            watch = [sys.executable, "-m", "benchmarks.viewer_port", "--watch",
                     _watch_target(scenario, ports), *(["raw"] if raw else [])]
            watcher = stack.enter_context(_child(watch))
            _read_until(watcher, re.compile(r"ready\n"), f"watcher ({scenario.key})")
        time.sleep(SETTLE_SECONDS)
        result = asyncio.run(_agent_measures(remote.pid, ports["rewarder"], pings=not raw))
        if watcher is not None:
            stats = json.loads(_stop(watcher).decode().strip().splitlines()[-1])
            if "error" in stats:
                raise RuntimeError(f"watcher ({scenario.key}): {stats['error']}")
            result.update(stats)
    return result


# The watcher (a subprocess: ``python -m benchmarks.viewer_port --watch TARGET [raw]``) --


async def _watch(target: str, raw: bool = False) -> None:
    """A noVNC-like watcher of ``tcp:PORT`` or ``ws://...`` until SIGTERM (``raw``: it
    asks for Raw only, as a recorder would, instead of Tight JPEG).

    Prints ``ready`` after its first update, then on SIGTERM one JSON line: updates/s and
    KB/s from the first update on (or ``error``).
    """
    import aiohttp

    from vncdriver.client_protocol import ClientProtocol, FramebufferUpdated
    from vncdriver.handshake import ClientHandshake
    from vncdriver.messages import Encoding, build_encodings

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    recv: Callable[[], Awaitable[bytes]]
    send: Callable[[bytes], Awaitable[None]]
    async with contextlib.AsyncExitStack() as stack:
        if target.startswith("ws://"):
            session = await stack.enter_async_context(aiohttp.ClientSession())
            ws = await stack.enter_async_context(session.ws_connect(
                target, max_msg_size=0, timeout=aiohttp.ClientWSTimeout(ws_close=1.0)))

            async def recv() -> bytes:
                msg = await ws.receive()
                if msg.type != aiohttp.WSMsgType.BINARY:
                    raise ConnectionError(f"the bridge sent {msg.type.name} ({msg.extra})")
                return bytes(msg.data)

            send = ws.send_bytes
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", int(target.split(":")[1]))
            stack.callback(writer.close)

            async def recv() -> bytes:
                if not (data := await reader.read(CHUNK)):
                    raise ConnectionError("the VNC server closed the connection")
                return data

            async def send(data: bytes) -> None:
                writer.write(data)
                await writer.drain()

        handshake = ClientHandshake(None)
        while not handshake.complete:
            handshake.receive_data(await recv())
            if out := handshake.data_to_send():
                await send(out)
        assert handshake.result is not None
        if raw:
            encodings = build_encodings((Encoding.RAW,))
        else:
            encodings = build_encodings((Encoding.TIGHT, Encoding.COPYRECT, Encoding.RAW),
                                        quality=6, compress_level=2)
        rfb = ClientProtocol(handshake.result, encodings=encodings)
        rfb.receive_data(handshake.trailing_data())
        rfb.request_update(incremental=False)
        await send(rfb.data_to_send())
        first: list[tuple[float, int, int]] = []  # (time, updates, bytes) at the first update

        async def pump() -> None:
            while True:
                rfb.receive_data(await recv())
                for event in rfb.events_received():
                    if isinstance(event, FramebufferUpdated):
                        if not first:
                            first.append((time.perf_counter(), rfb.stats.updates,
                                          rfb.stats.bytes_received))
                            print("ready", flush=True)
                        rfb.request_update(incremental=True)
                        await send(rfb.data_to_send())

        pumping = asyncio.create_task(pump())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([pumping, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if pumping.done():
            result: dict[str, Any] = {"error": repr(pumping.exception())}
        else:
            pumping.cancel()
            t, updates, nbytes = first[0]
            seconds = time.perf_counter() - t
            result = {"updates": (rfb.stats.updates - updates) / seconds,
                      "kbytes": (rfb.stats.bytes_received - nbytes) / 1024 / seconds}
        print(json.dumps(result), flush=True)


async def _serve_viewer(kind: str, env_id: str, scale: int) -> None:
    """A remote and its viewer on its own port, the viewer given the remote's VNC server
    (``kind`` "in-process") or not ("tcp": the loopback TCP bridge); prints like ``serve``."""
    from envserver.remote import Remote
    from envserver.viewer import Viewer

    remote = Remote(env_id, runtime_options={"scale": scale} if scale != 1 else None)
    await remote.start("127.0.0.1", 0, 0)
    assert remote.vnc is not None and remote.vnc_port is not None
    viewer = Viewer(remote.vnc_port, describe=remote.describe,
                    vnc_server=remote.vnc if kind == "in-process" else None)
    await viewer.start("127.0.0.1", 0)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(f"  viewer    http://127.0.0.1:{viewer.port}/viewer/ ({kind})\n"
          f"  agent address  vnc://127.0.0.1:{remote.vnc_port}+{remote.rewarder.port}", flush=True)
    await stop.wait()
    await viewer.close()
    await remote.close()


# Tables ----------------------------------------------------------------------------------






class _Runs:
    """One scenario's runs on one env: medians and ranges of each measure."""

    def __init__(self, runs: list[dict[str, float]]) -> None:
        self.runs = runs

    def median(self, key: str) -> float | None:
        values = [r[key] for r in self.runs if key in r]
        return statistics.median(values) if values else None

    def cell(self, key: str, scale: float = 1.0, digits: int = 0) -> str:
        values = [r[key] * scale for r in self.runs if key in r]
        if not values:
            return "-"
        mid = f"{statistics.median(values):,.{digits}f}"
        if len(values) == 1:
            return mid
        return f"{mid} ({min(values):,.{digits}f}..{max(values):,.{digits}f})"


def print_env(env_id: str, scale: int, results: dict[str, _Runs]) -> None:
    rounds = len(results[NONE.key].runs)
    fps = results[NONE.key].median("fps_limit") or 0.0
    print(f"\n  {env_id}{f' x{scale}' if scale != 1 else ''}: median of {rounds} round"
          f"{'s' * (rounds != 1)} (min..max); ratios are medians / the 'no watcher' median")
    base = results[NONE.key]
    columns = [("rtt_p50", "ping RTT p50 us"), ("rtt_mean", "mean us"), ("rtt_p99", "p99 us")]
    rows = []
    for s in SCENARIOS:
        r = results[s.key]
        rows.append([s.label])
        for key, _ in columns:
            rows[-1] += [r.cell(key, 1e6), _ratio(r.median(key), base.median(key))]
        rows[-1] += [r.cell("pipelined"), _ratio(r.median("pipelined"), base.median("pipelined"))]
    headers = [h for _, title in columns for h in (title, "/ none")]
    _table(["scenario", *headers, f"pipelined pings/s ({WINDOW} in flight)", "/ none"], rows)
    print()
    rows = []
    for s in SCENARIOS:
        r = results[s.key]
        rows.append([
            s.label,
            r.cell("cpu", 1e3, 1), _ratio(r.median("cpu"), base.median("cpu")),
            r.cell("fps", digits=1), _ratio(r.median("fps"), fps),
            r.cell("updates", digits=1), _ratio(r.median("updates"), fps),
            r.cell("kbytes", digits=1),
        ])
    _table(["scenario", "remote CPU ms/s", "/ none", "game fps", f"/ {fps:g}",
            "watcher updates/s", f"/ {fps:g}", "watcher KB/s"], rows)


def print_questions(everything: dict[str, dict[str, _Runs]]) -> None:
    print("\n  The questions, as ratios of medians: what the shipped (in-process) bridge adds over"
          " a watcher on VNC directly,\n  and what it saves over the TCP bridge it replaced.\n  RTT and"
          " CPU: below 1x is better; pings/s, updates/s: above")
    rows = []
    for env, results in everything.items():
        for a, b in ((BRIDGE, DIRECT), (BRIDGE, TCP_BRIDGE)):
            ra, rb = results[a.key], results[b.key]
            rows.append([
                f"{env}: {a.key} / {b.key}",
                *(_ratio(ra.median(k), rb.median(k))
                  for k in ("rtt_p50", "rtt_mean", "rtt_p99", "pipelined", "cpu", "updates",
                            "kbytes")),
            ])
    _table(["env: scenario / peer", "RTT p50", "RTT mean", "RTT p99", "pipelined/s",
            "remote CPU", "watcher upd/s", "watcher KB/s"], rows)
    print("  bridge = watcher via the shipped viewer's in-process bridge on its own port; tcp ="
          " the viewer's TCP bridge\n  (before; Xvnc runtimes); vnc = watcher on VNC directly")


def print_raw(results: dict[str, _Runs]) -> None:
    env_id, scale = RAW_ENV
    direct = results[DIRECT.key]
    rounds = len(direct.runs)
    print(f"\n  {env_id} x{scale}, a Raw watcher: median of {rounds} round{'s' * (rounds != 1)}"
          " (min..max); the bridge's own cost is its CPU over 'VNC directly' per MB carried")
    rows = []
    for s in RAW_SCENARIOS:
        r = results[s.key]
        cpu, base, mbytes = r.median("cpu"), direct.median("cpu"), r.median("kbytes")
        per_mb = "-"
        if s is not DIRECT and cpu is not None and base is not None and mbytes:
            per_mb = f"{(cpu - base) * 1e3 / (mbytes / 1024):.2f}"
        rows.append([s.label, r.cell("cpu", 1e3, 1), _ratio(cpu, base),
                     r.cell("updates", digits=1), r.cell("kbytes", 1 / 1024, 1), per_mb])
    _table(["scenario", "remote CPU ms/s", "/ vnc", "watcher updates/s", "watcher MB/s",
            "bridge CPU ms per MB"], rows)


# Main ------------------------------------------------------------------------------------


def main() -> None:
    from runtimes import registry

    began = time.perf_counter()
    before = _machine_ticks()
    time.sleep(0.5)
    print(f"  {os.cpu_count()} CPUs ({_busy_since(before):.0%} busy with other processes in the "
          f"half second before we started), OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS')}, all on 127.0.0.1")
    print(f"  per run: a fresh remote; watcher's first update, {SETTLE_SECONDS:g} s settle, "
          f"{CPU_SECONDS:g} s CPU window, {PING_SAMPLES} sequential pings each after a random"
          f" 0..{PING_PAUSE * 1e3:g} ms pause\n  (after {PING_WARMUP} back to back), "
          f"{PIPELINED:,} pipelined; then the watcher, then the remote stop")
    envs = [(env_id, scale) for env_id, scale in ENVS if env_id in registry.env_ids()]
    skipped = [f"{env_id}: not installed ({registry.missing})" for env_id, scale in ENVS
               if (env_id, scale) not in envs]
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        env_id: {s.key: [] for s in SCENARIOS} for env_id, _ in envs
    }
    raw_runs: dict[str, list[dict[str, float]]] = {s.key: [] for s in RAW_SCENARIOS}
    start_ticks = _machine_ticks()
    round_seconds = 0.0
    for n in range(ROUNDS):
        elapsed = time.perf_counter() - began
        if n and elapsed + round_seconds > BUDGET_SECONDS:
            skipped.append(f"rounds {n + 1}..{ROUNDS}: {elapsed:.0f} s spent, one more takes "
                           f"~{round_seconds:.0f} s, past the {BUDGET_SECONDS:.0f} s budget")
            break
        round_start = time.perf_counter()
        order = SCENARIOS[n % len(SCENARIOS):] + SCENARIOS[:n % len(SCENARIOS)]
        for env_id, scale in envs:
            for scenario in order:
                runs[env_id][scenario.key].append(measure(scenario, env_id, scale))
        if RAW_ENV in envs:
            for scenario in RAW_SCENARIOS[n % len(RAW_SCENARIOS):] + RAW_SCENARIOS[:n % len(RAW_SCENARIOS)]:
                raw_runs[scenario.key].append(measure(scenario, *RAW_ENV, raw=True))
        round_seconds = time.perf_counter() - round_start
    busy = _busy_since(start_ticks)

    everything = {}
    for env_id, scale in envs:
        results = {k: _Runs(v) for k, v in runs[env_id].items()}
        everything[env_id] = results
        print_env(env_id, scale, results)
    print_questions(everything)
    if RAW_ENV in envs:
        print_raw({k: _Runs(v) for k, v in raw_runs.items()})
    print("\n  remote CPU: the remote process's on-CPU time per wall second while only the game"
          " loop and the watcher ran;\n  ping RTT: a ping that meets the remote's frame work"
          f" (step, encode, bridge) waits for it; p99 of {PING_SAMPLES} is the "
          f"{PING_SAMPLES // 100}th slowest")
    for why in skipped:
        print(f"  skipped {why}")
    print(f"\n  machine {busy:.0%} busy over the runs ({os.cpu_count()} cores); "
          f"total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--watch"]:
        asyncio.run(_watch(sys.argv[2], raw=sys.argv[3:4] == ["raw"]))
    elif sys.argv[1:2] == ["--remote"]:
        asyncio.run(_serve_viewer(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    else:
        main()
