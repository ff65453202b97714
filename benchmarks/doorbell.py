"""Whether a doorbell pays: the batched lane's wake-ups over its Unix socket against an
eventfd pair (issue 40: "an optional doorbell, eventfd or futex in the segment, if it
pays in the batched lane").

A batched lockstep vector step is one request and one reply per remote process, each a
wake-up of the other side: the agent's send wakes the remote's reader thread, the
remote's reply wakes the agent (:mod:`rewarder.link_reader`, the local twin of
:mod:`rewarder.local_socket`). A doorbell would keep the messages in shared memory and
ring an eventfd instead of writing the socket. This times the two ways of waking alone,
between two processes, with nothing else on either side (no framing, no parsing, no
stepping: the most a doorbell could save): a request of :data:`REQUEST_BYTES` and a reply
of :data:`REPLY_BYTES` (what a 4-game batch step sends and gets back) over a Unix stream
socket pair, against 8-byte eventfd writes each way. Rows alternate within each round,
:data:`ROUNDS` rounds, each of :data:`ROUND_TRIPS` round trips, medians printed; the CPU
is both processes' (the scheduler's nanoseconds), the agent's and the peer's placement
one of:

- **cross-CPU**: each pinned to a CPU of its own (a remote process and the agent that
  steps it, as ``start_local`` pins a lockstep vector's processes);
- **same CPU**: both on one CPU (the machine busier than it has cores);
- **free**: where the kernel puts them.

The last lines say what the doorbell would save per env-step of an 8-game vector (two
processes: two round trips per vector step), against the 300 us of CPU per env-step the
issue asks for.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Final

from benchmarks.common import quick, schedstat_cpu, table

ROUNDS: Final = quick(7, 2)
ROUND_TRIPS: Final = quick(20_000, 3_000)
#: A 4-game ``v0.batch.step`` request's bytes (WebSocket-framed), and its reply's.
REQUEST_BYTES: Final = 400
REPLY_BYTES: Final = 700
#: The n = 8 vector the saving is put against: games, and processes (round trips a step).
VECTOR_GAMES: Final = 8
VECTOR_PROCESSES: Final = 2
#: The issue's CPU target per env-step (all processes), in microseconds.
TARGET_US: Final = 300
#: Seconds the peer may take to start.
START_SECONDS: Final = 30.0
#: An eventfd value that tells the peer to end (a ring is 1).
STOP: Final = 1 << 20


def _peer_socket(fd: int) -> None:
    """The peer's side over the socket: read a request, write a reply, until EOF."""
    sock = socket.socket(fileno=fd)
    buffer, reply = bytearray(1 << 16), b"r" * REPLY_BYTES
    while sock.recv_into(buffer):
        sock.sendall(reply)


def _peer_bell(ring: int, answer: int) -> None:
    """The peer's side of the doorbell: wait for a ring, ring back, until told to stop."""
    while os.eventfd_read(ring) < STOP:
        os.eventfd_write(answer, 1)


class _Peer:
    """This module run as the peer (``--peer socket FD`` or ``--peer bell RING ANSWER``)."""

    def __init__(self, kind: str, fds: tuple[int, ...]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.doorbell", "--peer", kind, *map(str, fds)],
            pass_fds=fds, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {kind} peer did not start")

    def end(self) -> None:
        try:
            self.process.wait(START_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _timed(trip: Callable[[], None], pids: tuple[int, ...]) -> tuple[float, float]:
    """Wall and CPU (both processes) of one round trip, in microseconds."""
    for _ in range(ROUND_TRIPS // 10):  # (warm up)
        trip()
    cpu, started = schedstat_cpu(*pids), time.perf_counter()
    for _ in range(ROUND_TRIPS):
        trip()
    wall = time.perf_counter() - started
    return wall / ROUND_TRIPS * 1e6, (schedstat_cpu(*pids) - cpu) / ROUND_TRIPS * 1e6


def _pinned(pid: int, cpus: tuple[set[int], set[int]] | None) -> None:
    """The agent (this process) and ``pid`` on their CPUs (None: anywhere)."""
    every = set(range(os.cpu_count() or 1))
    mine, theirs = cpus if cpus is not None else (every, every)
    os.sched_setaffinity(0, mine)
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), theirs)


def _socket_row(cpus: tuple[set[int], set[int]] | None) -> tuple[float, float]:
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    peer = _Peer("socket", (theirs.fileno(),))
    theirs.close()
    buffer, request = bytearray(1 << 16), b"q" * REQUEST_BYTES

    def trip() -> None:
        mine.sendall(request)
        got = 0
        while got < REPLY_BYTES:
            got += mine.recv_into(buffer)

    try:
        _pinned(peer.process.pid, cpus)
        return _timed(trip, (os.getpid(), peer.process.pid))
    finally:
        mine.close()
        peer.end()


def _bell_row(cpus: tuple[set[int], set[int]] | None) -> tuple[float, float]:
    ring, answer = os.eventfd(0), os.eventfd(0)
    peer = _Peer("bell", (ring, answer))

    def trip() -> None:
        os.eventfd_write(ring, 1)
        os.eventfd_read(answer)

    try:
        _pinned(peer.process.pid, cpus)
        return _timed(trip, (os.getpid(), peer.process.pid))
    finally:
        os.eventfd_write(ring, STOP)
        peer.end()
        os.close(ring)
        os.close(answer)


def main() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    print(f"  {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start; "
          f"{ROUNDS} rounds of {ROUND_TRIPS:,} round trips a row, alternated")
    placements: dict[str, tuple[set[int], set[int]] | None] = {"free": None}
    if len(cpus) >= 2:
        placements["cross-CPU"] = ({cpus[0]}, {cpus[1]})
    placements["same CPU"] = ({cpus[0]}, {cpus[0]})
    seen: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for round_ in range(ROUNDS):
            order = [("socket", _socket_row), ("doorbell", _bell_row)]
            for placement, pins in placements.items():
                for kind, row in order if round_ % 2 == 0 else order[::-1]:
                    seen.setdefault((placement, kind), []).append(row(pins))
    finally:
        os.sched_setaffinity(0, set(cpus))
    rows = []
    saved: dict[str, float] = {}
    for placement in placements:
        (sock_wall, sock_cpu), (bell_wall, bell_cpu) = (
            (statistics.median(w for w, _ in seen[(placement, kind)]),
             statistics.median(c for _, c in seen[(placement, kind)]))
            for kind in ("socket", "doorbell"))
        saved[placement] = sock_cpu - bell_cpu
        rows.append([placement, f"{sock_wall:.1f}", f"{bell_wall:.1f}", f"{bell_wall / sock_wall:.2f}",
                     f"{sock_cpu:.1f}", f"{bell_cpu:.1f}", f"{bell_cpu / sock_cpu:.2f}"])
    table(["placement", "socket wall us", "doorbell wall us", "ratio", "socket CPU us",
           "doorbell CPU us", "ratio"], rows)
    per_step = VECTOR_PROCESSES / VECTOR_GAMES
    for placement, us in saved.items():
        print(f"  {placement}: a doorbell saves {us:.1f} us of CPU a round trip, {us * per_step:.1f} us "
              f"an env-step of an n={VECTOR_GAMES} vector ({us * per_step / TARGET_US:.1%} of the "
              f"{TARGET_US} us target)")
    print(f"  load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peer"]:
        kind, *fds = sys.argv[2:]
        print("ready", flush=True)
        if kind == "socket":
            _peer_socket(int(fds[0]))
        else:
            _peer_bell(int(fds[0]), int(fds[1]))
    else:
        main()
