"""Browser and desktop remotes: CPU per frame, action -> pixel latency; ours vs Xvnc serving viewers.

Issue 3/7 moved ``miniwob.*`` and ``x11.*`` behind the remote's own VNC server: the
runtime reads its Xvnc display over a Unix socket and the remote serves the frames. The
peer is the path it replaced, commit :data:`PEER_COMMIT` (Xvnc on the VNC port, viewers
connected to it directly), read from this repository's history with ``git archive`` and
run as its own ``serve`` (skipped without git history); ``builtin.Catch-v0`` is the
in-process game for scale.

- **CPU per real-time frame**: one viewer (our ``VNCClient``, Raw) watches the remote
  while the pointer moves every frame (XEyes redraws its eyes; MiniWoB's page mostly
  stands still); the CPU of the ``serve`` process and everything it started (Xvnc,
  Chromium's processes) over :data:`SECONDS`, per frame at 60 fps. Rounds alternate
  ours and the peer; medians.
- **Action -> pixel latency**: the viewer moves the pointer across XEyes, or types a
  letter into ``miniwob.EnterText-v0``'s field, and times the first update after it;
  p50/p99 over :data:`TRIALS`.
- **Lockstep steps/s** on :data:`LOCKSTEP_TASKS`: an agent's ``gymnasium.make(...,
  mode="lockstep")`` env (a remote process, the rewarder, shared-memory frames) against
  the floor of the design, the same runtime stepped in this process with no remote
  (``MiniWoBRuntime.aadvance``: DevTools input, page clock, screenshot).

``python -m benchmarks browser_remotes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import io
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from benchmarks.common import quick, ratio, schedstat_cpu, table  # noqa: E402

#: The commit whose browser and desktop remotes Xvnc served directly.
PEER_COMMIT: Final = "9046297"
FPS: Final = 60.0
#: Seconds of each CPU reading, after WARMUP seconds, and rounds per env and path.
SECONDS: Final = quick(5.0, 1.0)
WARMUP: Final = 1.0
ROUNDS: Final = quick(3, 1)
#: Latency trials per env and path, and the pause between two (the screen settles).
TRIALS: Final = quick(60, 10)
SETTLE: Final = 0.05
#: Trials between two clicks into EnterText's field, and the pause after a click.
FOCUS_EVERY: Final = 20
FOCUS_PAUSE: Final = 0.3
#: Seconds a remote may take to print its address, and an update to arrive.
START_TIMEOUT: Final = 60.0
UPDATE_TIMEOUT: Final = 2.0
LOCKSTEP_TASKS: Final = quick(
    ("miniwob.ClickTest-v0", "miniwob.ClickButton-v0", "miniwob.EnterText-v0"), ("miniwob.ClickTest-v0",))
#: Lockstep steps timed per task and path (clicks sweeping the task's click grid).
LOCKSTEP_STEPS: Final = quick(100, 15)
CPU_ENVS: Final = quick(("miniwob.ClickTest-v0", "x11.XEyes-v0", "builtin.Catch-v0"),
                         ("x11.XEyes-v0", "builtin.Catch-v0"))
LATENCY_ENVS: Final = quick(("x11.XEyes-v0", "miniwob.EnterText-v0"), ("x11.XEyes-v0",))
_ADDRESS: Final = re.compile(rb"vnc://(?P<host>[^:\s]+):(?P<vnc>\d+)\+(?P<rew>\d+)")


def _peer_tree(root: Path) -> Path | None:
    """PEER_COMMIT's source tree, unpacked into a temporary directory; None without git."""
    target = Path(tempfile.mkdtemp(prefix="universe-peer-"))
    try:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", PEER_COMMIT], capture_output=True, check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


@contextlib.contextmanager
def _serve(env_id: str, source: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``serve env_id`` from the tree at ``source``; (its process, the VNC port)."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "universe_remote", "serve", env_id, "--vnc-port", "0",
         "--rewarder-port", "0"],
        cwd=source, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT
        port = None
        for line in proc.stdout:
            match = _ADDRESS.search(line)
            if match:
                port = int(match["vnc"])
                break
            if time.monotonic() > deadline:
                break
        if port is None:
            raise RuntimeError(f"serve {env_id} from {source} printed no address")
        yield proc, port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = Path(stat).read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


async def _cpu_per_frame(env_id: str, pid: int, port: int) -> float:
    """Milliseconds of CPU per frame of the whole remote while a viewer watches and the
    pointer moves every frame."""
    from vncdriver.client import VNCClient

    async with VNCClient(f"127.0.0.1::{port}", encoding="raw") as viewer:
        width, height = viewer.width, viewer.height

        async def wiggle(seconds: float) -> None:
            end, i = time.monotonic() + seconds, 0
            while time.monotonic() < end:
                i += 1
                viewer.pointer_event((i * 7) % width, (i * 3) % height, 0)
                await asyncio.sleep(1 / FPS)

        await wiggle(WARMUP)
        pids = _tree(pid)
        cpu0, wall0 = schedstat_cpu(*pids), time.monotonic()
        await wiggle(SECONDS)
        cpu, wall = schedstat_cpu(*pids) - cpu0, time.monotonic() - wall0
    return 1e3 * cpu / (wall * FPS)


async def _latency(env_id: str, port: int) -> list[float]:
    """Seconds from an action to the first update after it, TRIALS times."""
    from vncdriver.client import VNCClient

    out: list[float] = []
    async with VNCClient(f"127.0.0.1::{port}", encoding="raw") as viewer:
        typing = env_id.startswith("miniwob.")
        for i in range(TRIALS):
            if typing and i % FOCUS_EVERY == 0:  # (again: the task's 10 s clock starts
                # a new episode, whose field has no focus) MiniWoB's enter-text field
                viewer.send_events([("PointerEvent", 80, 75, 1), ("PointerEvent", 80, 75, 0)])
                await asyncio.sleep(FOCUS_PAUSE)
            before = viewer.updates
            sent = time.perf_counter()
            if typing:  # a letter, then erase it: every key changes the field
                key = "a" if i % 2 == 0 else "BackSpace"
                viewer.send_events([("KeyEvent", key, True), ("KeyEvent", key, False)])
            else:
                x = viewer.width // 4 if i % 2 else 3 * viewer.width // 4
                viewer.pointer_event(x, viewer.height // 2, 0)
            with contextlib.suppress(TimeoutError):
                await viewer.wait_update(before, UPDATE_TIMEOUT)
                out.append(time.perf_counter() - sent)
            await asyncio.sleep(SETTLE)
    return out


def env_steps_per_s(env_id: str, steps: int = LOCKSTEP_STEPS) -> float:
    """Lockstep steps/s of an agent's env over a local remote (clicks, then no-ops); also
    benchmarks/browser_lockstep.py's gymnasium row."""
    import gymnasium

    import remotes  # noqa: F401 (registers the ids)

    env = gymnasium.make(f"universe-remote/{env_id}", mode="lockstep", frameskip=1)
    try:
        env.reset(seed=1)
        started = time.perf_counter()
        for i in range(steps):
            _, _, terminated, truncated, _ = env.step(1 + (i * 37) % 336)
            if terminated or truncated:
                env.reset()
        return steps / (time.perf_counter() - started)
    finally:
        env.close()


async def _runtime_steps_per_s(env_id: str) -> float:
    """The same steps on the runtime in this process: the floor of any remote."""
    from runtimes import registry
    from runtimes.base import PointerEvent

    runtime = registry.lookup(env_id)()
    await runtime.astart()
    try:
        runtime.mode = "lockstep"
        await runtime.areset(1)
        started = time.perf_counter()
        for i in range(LOCKSTEP_STEPS):
            x, y = 5 + (i * 37) % 150, 55 + (i * 11) % 150
            click = [PointerEvent(x, y, 1), PointerEvent(x, y, 0)]
            if (await runtime.aadvance(click, 1)).done:
                await runtime.areset(None)
        return LOCKSTEP_STEPS / (time.perf_counter() - started)
    finally:
        await runtime.aclose()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    here = Path(__file__).resolve().parent.parent
    peer = _peer_tree(here)
    paths = {"ours": here, **({f"peer {PEER_COMMIT}": peer} if peer else {})}
    if peer is None:
        print(f"  (no git history: the peer, {PEER_COMMIT}'s Xvnc-served path, is skipped)")
    print(f"  CPU of the serve process and all it started, per 60 fps frame; {ROUNDS} rounds "
          f"of {SECONDS:g} s alternated, medians; a viewer watches, the pointer moves each frame")
    cpu: dict[tuple[str, str], list[float]] = {}
    for _ in range(ROUNDS):
        for env_id in CPU_ENVS:
            for name, source in paths.items():
                if env_id.startswith("builtin.") and name != "ours":
                    continue
                with _serve(env_id, source) as (proc, port):
                    cpu.setdefault((env_id, name), []).append(
                        asyncio.run(_cpu_per_frame(env_id, proc.pid, port)))
    rows = []
    catch = statistics.median(cpu[("builtin.Catch-v0", "ours")])
    for env_id in CPU_ENVS:
        ours = statistics.median(cpu[(env_id, "ours")])
        theirs = (statistics.median(cpu[(env_id, f"peer {PEER_COMMIT}")])
                  if peer and not env_id.startswith("builtin.") else None)
        rows.append([env_id, f"{ours:.3f}", f"{theirs:.3f}" if theirs else "-",
                     ratio(ours, theirs), ratio(ours, catch)])
    table(["env", "ours ms/frame", "Xvnc-served ms/frame", "ours/peer", "ours/Catch"], rows)
    print(f"  action -> pixel latency (the first update after the action), {TRIALS} trials")
    rows = []
    for env_id in LATENCY_ENVS:
        for name, source in paths.items():
            with _serve(env_id, source) as (_, port):
                lat = asyncio.run(_latency(env_id, port))
            rows.append([env_id, name, f"{1e3 * _pct(lat, 0.5):.1f}", f"{1e3 * _pct(lat, 0.99):.1f}",
                         f"{len(lat)}/{TRIALS}"])
    table(["env", "path", "p50 ms", "p99 ms", "answered"], rows)
    print(f"  lockstep steps/s, {LOCKSTEP_STEPS} click steps of one frame each, rounds alternated")
    rows = []
    for env_id in LOCKSTEP_TASKS:
        ours = statistics.median(env_steps_per_s(env_id) for _ in range(2))
        floor = statistics.median(asyncio.run(_runtime_steps_per_s(env_id)) for _ in range(2))
        rows.append([env_id, f"{ours:.1f}", f"{floor:.1f}", ratio(ours, floor)])
    table(["task", "env (remote) steps/s", "runtime alone steps/s", "env/runtime"], rows)
