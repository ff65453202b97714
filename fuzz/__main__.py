"""``python -m fuzz [--rewarder N] [--rfb N] [--grpc N] [--seed S]``: fuzz real remotes for long.

Starts ``universe-remote serve builtin.Catch-v0`` as a subprocess for each port (lockstep
for the rewarder and the dm_env_rpc runs, real time for the RFB run, so a healthy viewer
always has new frames), fuzzes it on 127.0.0.1, and prints the counts, the remote's RSS
(at the start, at the end, its peak, and along the way) and its log lines by kind. Exits 1
if anything crashed, hung or went unanswered, the remote logged a traceback, or
(dm_env_rpc) a kind of log line came more often than once per ``LOG_INTERVAL``. ``make
fuzz`` runs it with the defaults: 1,000,000 rewarder messages (the rewarder's remote
serves two games, so that its batch steps reach them), 100,000 RFB messages and 100,000
dm_env_rpc requests. ``0`` skips a port.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import re
import shutil
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import fields
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from fuzz import dmrpc, rewarder, rfb  # noqa: E402
from remotes.local import start_local  # noqa: E402
from rewarder.lograte import LOG_INTERVAL  # noqa: E402

#: A remote's log line: "2026-01-01 12:00:00,000 LEVEL logger: message".
_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (\w+) ([\w.]+): (.*)$")


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """``VmRSS`` (now) or ``VmHWM`` (the peak) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


class RSSSampler:
    """The RSS of ``pid`` once a second, in a thread, while the fuzz runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.samples.append((time.perf_counter() - self._started, rss_kib(self.pid)))
            except OSError:
                return
            if self._stop.wait(1.0):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def curve(self, points: int = 10) -> str:
        """The RSS (MiB) at ``points`` moments spread over the run."""
        if not self.samples:
            return "-"
        picks = [self.samples[round(i * (len(self.samples) - 1) / (points - 1))] for i in range(points)]
        return ", ".join(f"{t:.0f}s {kib / 1024:.0f}" for t, kib in picks)


def log_kinds(text: str) -> tuple[Counter[str], int]:
    """A remote's log lines by kind (level, logger and the message with its numbers and
    quoted parts blanked), and how many tracebacks it holds."""
    kinds: Counter[str] = Counter()
    for line in text.splitlines():
        found = _LINE.match(line)
        if found is None:
            continue
        level, logger, message = found.groups()
        message = re.sub(r"'[^']*'|\"[^\"]*\"|\([^)]*\)", "…", message)
        message = re.sub(r"\d+", "N", message)
        kinds[f"{level} {logger}: {message[:70]}"] += 1
    return kinds, text.count("Traceback (most recent call last)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fuzz_one(name: str, count: int, seed: int) -> bool:
    """Fuzz one port of a fresh remote; print the figures; whether it held."""
    mode = "realtime" if name == "rfb" else "lockstep"
    extra = ["--mode", mode]
    grpc_port = free_port() if name == "grpc" else 0
    if name == "grpc":
        extra += ["--dm-env-rpc-port", str(grpc_port)]
    # The rewarder's: two games in the process, so that its batch steps reach the games.
    games = 2 if name == "rewarder" else 1
    with start_local("builtin.Catch-v0", games, extra_args=extra, games_per_process=games) as local:
        local.keep_logs = True
        pid = local.processes[0].pid
        address = local.addresses[0]
        before, started = rss_kib(pid), time.perf_counter()
        sampler = RSSSampler(pid)
        counts: Any
        if name == "rewarder":
            assert address.rewarder_port is not None
            counts = asyncio.run(rewarder.run(address.rewarder_port, count, seed))
        elif name == "rfb":
            assert address.vnc_port is not None
            counts = asyncio.run(rfb.run(address.vnc_port, count, seed))
        else:
            counts = asyncio.run(dmrpc.run(grpc_port, count, seed))
        took = time.perf_counter() - started
        sampler.stop()
        alive = local.processes[0].poll() is None
        after = rss_kib(pid) if alive else 0
        peak = rss_kib(pid, "VmHWM") if alive else 0
    log_path = local.logs[0]
    kinds, tracebacks = log_kinds(log_path.read_text(errors="replace"))
    shutil.rmtree(log_path.parent, ignore_errors=True)
    result = {f.name: getattr(counts, f.name) for f in fields(counts)}
    load = os.getloadavg()
    print(f"{name}: " + ", ".join(f"{k}={dict(v) if isinstance(v, Counter) else v}"
                                   for k, v in result.items()))
    print(f"  {counts.messages:,} messages in {took:.0f} s ({counts.messages / took:,.0f}/s); "
          f"remote {'alive' if alive else 'DEAD'}; load average {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f} on {os.cpu_count()} CPUs")
    print(f"  remote RSS: start {before / 1024:.0f} MiB, end {after / 1024:.0f} MiB, peak "
          f"(VmHWM) {peak / 1024:.0f} MiB; along the way (MiB): {sampler.curve()}")
    print(f"  remote log: {sum(kinds.values())} lines, {tracebacks} tracebacks")
    for kind, n in kinds.most_common(20):
        print(f"    {n:6d}  {kind}")
    bad = result.get("unanswered", 0) + result.get("hangs", 0) + result.get("crashes", 0)
    held = bad == 0 and alive and not tracebacks  # (a traceback: a request took a bug's path)
    if tracebacks:
        print(f"  the remote logged {tracebacks} tracebacks: a request reached a bug")
    if name == "grpc":
        # A kind logs once per interval, plus once at the start and once at shutdown.
        most = math.ceil(took / LOG_INTERVAL) + 2
        noisy = [k for k, n in kinds.items() if n > most and not k.startswith("INFO")]
        if noisy or tracebacks:
            print(f"  too many lines (over {most} of a kind) or tracebacks: {noisy}")
        held = held and not noisy and not tracebacks
    return held


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--rewarder", type=int, default=1_000_000, help="rewarder messages")
    parser.add_argument("--rfb", type=int, default=100_000, help="RFB client messages")
    parser.add_argument("--grpc", type=int, default=100_000, help="dm_env_rpc requests")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # Writing to a connection the server just closed is what RFB fuzzing does; quiet.
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    failed = False
    for name, count in (("rewarder", args.rewarder), ("rfb", args.rfb), ("grpc", args.grpc)):
        if count > 0:
            failed |= not fuzz_one(name, count, args.seed)
    print("fuzz: " + ("FAILED" if failed else "no crash, hang or unanswered request"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
