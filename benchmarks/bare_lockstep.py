"""The bare design's ceiling: what issue 40's lane costs with nothing of ours around it.

Holds :func:`bare_stepper`, the rows of ``lockstep_peers`` it names: the same
Pong games, packed into processes as ``start_local`` packs a lockstep vector (one process
per core), stepped with the lane's shape (one JSON request per process per vector step, a
blocking reader in the server, frames written by ALE into slots of one shared file that the
agent copies into a fresh batch) and nothing else: no WebSocket, no v0 headers, no state
table, observers, VNC, checks or infos. Its server is this module run as a program (``python -m
benchmarks.bare_lockstep GAMES SEGMENT``: it binds 127.0.0.1, prints its port, serves one
connection until EOF). What ours spends beyond this row, on the same machine in the same
run, is the cost of everything the bare design leaves out; the row moves with the machine
as the peers do, so ``ours / bare`` holds from a quiet machine to a busy one better than
a ratio to an absolute figure.
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Final

import numpy as np
import orjson

from benchmarks.atari_common import FRAMESKIP, ROM, drawn
from remotes.local import default_games_per_process

#: The frame's shape (Pong's RGB screen), and a slot's bytes.
SHAPE: Final = (210, 160, 3)
FRAME_BYTES: Final = SHAPE[0] * SHAPE[1] * SHAPE[2]
#: A message's length prefix (little-endian u32), and the largest message either end takes.
PREFIX: Final = struct.Struct("<I")
MAX_MESSAGE: Final = 1 << 16
#: Seconds a server may take to start (import ALE, load the ROM) and print its port.
START_SECONDS: Final = 60.0
#: How the segments' names in /dev/shm begin (the agent's pid and the server's id follow).
SEGMENT_PREFIX: Final = "bare-lockstep-"
#: Pong's legal actions: the server plays the minimal action set's index it is sent.
ACTIONS: Final = 6


def _serve(games: int, segment: str) -> None:
    """The server: ``games`` Pong games, frames into slots of ``/dev/shm/segment``."""
    from ale_py import ALEInterface, LoggerMode, roms

    ALEInterface.setLoggerMode(LoggerMode.Error)
    rom = roms.get_rom_path(ROM)
    if rom is None:
        raise SystemExit(f"ale-py has no {ROM} ROM: pip install 'ale-py>=0.9'")
    ales = []
    for game in range(games):
        ale = ALEInterface()
        ale.setInt("random_seed", game)
        ale.setFloat("repeat_action_probability", 0.0)
        ale.loadROM(rom)
        ales.append(ale)
    legal = ales[0].getMinimalActionSet()
    fd = os.open(f"/dev/shm/{segment}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.ftruncate(fd, games * FRAME_BYTES)
    slots = np.frombuffer(mmap.mmap(fd, games * FRAME_BYTES), np.uint8).reshape(games, *SHAPE)
    with socket.create_server(("127.0.0.1", 0)) as server:
        print(server.getsockname()[1], flush=True)
        conn, _ = server.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        while (request := _receive(conn)) is not None:
            out = []
            for ale, slot, action in zip(ales, slots, orjson.loads(request), strict=True):
                reward = 0
                for _ in range(FRAMESKIP):
                    reward += ale.act(legal[action])
                done = ale.game_over()
                if done:
                    ale.reset_game()
                ale.getScreenRGB(slot)
                out.append((reward, done))
            _send(conn, orjson.dumps(out))


def _receive(conn: socket.socket) -> bytes | None:
    """One length-prefixed message (None at EOF)."""
    head = conn.recv(PREFIX.size, socket.MSG_WAITALL)
    if len(head) < PREFIX.size:
        return None
    size = PREFIX.unpack(head)[0]
    if size > MAX_MESSAGE:
        raise ValueError(f"a {size}-byte message: the bare protocol takes {MAX_MESSAGE} at most")
    return conn.recv(size, socket.MSG_WAITALL)


def _send(conn: socket.socket, body: bytes) -> None:
    conn.sendall(PREFIX.pack(len(body)) + body)


class _Process:
    """One server: its process, connection and mapped slots."""

    def __init__(self, games: int, stack: ExitStack) -> None:
        self.games = games
        self.segment = f"{SEGMENT_PREFIX}{os.getpid()}-{id(self):x}"
        stack.callback(self._unlink)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bare_lockstep", str(games), self.segment],
            stdout=subprocess.PIPE, text=True)
        stack.callback(self._stop)
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline())
        self.conn = socket.create_connection(("127.0.0.1", port), timeout=START_SECONDS)
        stack.callback(self.conn.close)
        self.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with open(f"/dev/shm/{self.segment}", "rb") as f:
            self.slots = np.frombuffer(mmap.mmap(f.fileno(), games * FRAME_BYTES, prot=mmap.PROT_READ),
                                       np.uint8).reshape(games, *SHAPE)

    def _stop(self) -> None:
        """The server ends at EOF (its connection closed first); killed if it does not."""
        try:
            self.process.wait(START_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _unlink(self) -> None:
        try:
            os.unlink(f"/dev/shm/{self.segment}")
        except FileNotFoundError:
            pass


#: A bare vector's step: ``n`` action indices in, the fresh frame batch and the rewards out.
Step = Callable[[Sequence[int]], tuple[np.ndarray, np.ndarray]]


@contextmanager
def bare_vector(n: int) -> Iterator[tuple[Step, list[int]]]:
    """A step function over ``n`` games in ``start_local``'s lockstep packing (actions:
    ``n`` indices into Pong's minimal set; returns the fresh frame batch and the
    rewards), and the server pids."""
    per = default_games_per_process(n, lockstep=True)
    with ExitStack() as stack:
        parts = [_Process(min(per, n - start), stack) for start in range(0, n, per)]
        cuts = [(start, start + p.games) for start, p in zip(range(0, n, per), parts, strict=True)]

        def step(actions: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
            for part, (a, b) in zip(parts, cuts, strict=True):
                _send(part.conn, orjson.dumps(actions[a:b]))
            batch = np.empty((n, *SHAPE), np.uint8)
            rewards = np.empty(n)
            for part, (a, b) in zip(parts, cuts, strict=True):
                reply = _receive(part.conn)
                if reply is None:
                    raise ConnectionError(f"bare server {part.process.pid} went away")
                batch[a:b] = part.slots
                rewards[a:b] = [reward for reward, _ in orjson.loads(reply)]
            return batch, rewards

        yield step, [p.process.pid for p in parts]


@contextmanager
def bare_stepper(n: int) -> Iterator[tuple[Callable[[], object], list[int]]]:
    """The bare design over ``n`` games: a step of random actions, and the server pids."""
    with bare_vector(n) as (step, pids):
        rng = np.random.default_rng(0)
        actions = drawn(lambda: rng.integers(0, ACTIONS, n).tolist())
        yield lambda: step(actions()), pids


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2])
