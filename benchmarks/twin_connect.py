"""What checking the Unix twin's peer costs a lockstep agent: a connect, not a step.

An agent uses a remote's Unix twin only when the process behind the name holds the
rewarder's TCP port (:mod:`rewarder.local_peer`: ``SO_PEERCRED``, ``/proc/net/tcp``, the
peer's fds), once per connection, before the handshake. Against one real local
``builtin.Catch-v0`` lockstep remote (``remotes.start_local``), rows alternate within
each round, :data:`ROUNDS` rounds, medians printed:

- **connect, twin**: ``BlockingRewarder(local=True).connect()`` (no clock calibration):
  the dial, the check, the WebSocket handshake and the remote's describe;
- **connect, TCP**: the same with ``local=False``;
- **check alone**: :func:`rewarder.local_peer.refusal` on a connection to the twin
  (skipped on code without the module: run this file against an older checkout to get
  its "before" connect times);
- **step, twin**: one lockstep ``v0.env.step`` of 1 frame over the twin, for scale (a
  step never runs the check).
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections.abc import Callable
from typing import Final

from benchmarks.common import quick, table
from remotes import start_local
from rewarder import local_socket
from rewarder.blocking import BlockingRewarder

ROUNDS: Final = quick(200, 20)
#: Steps timed per round for the step row.
STEPS: Final = quick(20, 5)


def _connect(address: str, local: bool) -> Callable[[], float]:
    def run() -> float:
        client = BlockingRewarder(address, local=local, calibration_pings=0)
        started = time.perf_counter()
        client.connect()
        took = time.perf_counter() - started
        if client.over_unix is not local:
            raise RuntimeError(f"over_unix is {client.over_unix}, expected {local}")
        client.close()
        return took
    return run


def _check(port: int) -> Callable[[], float] | None:
    try:
        from rewarder import local_peer
    except ImportError:
        return None

    def run() -> float:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(local_socket.name(port))
            started = time.perf_counter()
            why = local_peer.refusal(sock, port)
            took = time.perf_counter() - started
        if why is not None:
            raise RuntimeError(f"the remote's own twin was refused: {why}")
        return took
    return run


def main() -> None:
    print(f"  {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start")
    with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"],
                     games_per_process=1) as local:
        port, step_port = (each.rewarder_port for each in local.addresses)
        assert port is not None
        address = f"127.0.0.1:{port}"
        fds = len(os.listdir(f"/proc/{local.processes[0].pid}/fd"))
        rows: dict[str, Callable[[], float]] = {
            "connect, twin": _connect(address, True),
            "connect, TCP": _connect(address, False),
        }
        if (check := _check(port)) is not None:
            rows["check alone"] = check
        stepper = BlockingRewarder(f"127.0.0.1:{step_port}", local=True, calibration_pings=0)
        stepper.connect()
        try:
            def reset() -> None:
                episode = stepper.reset(seed=0, mode="lockstep")
                stepper.wait_for_state("running", episode, 30.0)

            reset()

            def step() -> float:
                took = 0.0
                for _ in range(STEPS):  # the resets between episodes left out
                    started = time.perf_counter()
                    done = stepper.step((), 1).done
                    took += time.perf_counter() - started
                    if done:
                        reset()
                return took / STEPS

            seen: dict[str, list[float]] = {name: [] for name in rows}
            seen["step, twin"] = []
            for _ in range(ROUNDS):
                for name, run in rows.items():
                    seen[name].append(run())
                seen["step, twin"].append(step())
        finally:
            stepper.close()
    table(["row", "median", "p90"], [
        [name, f"{statistics.median(times) * 1e6:.0f} µs",
         f"{statistics.quantiles(times, n=10)[-1] * 1e6:.0f} µs"]
        for name, times in seen.items()
    ])
    print(f"  the remote held {fds} fds (the check reads them until it finds the port's)")
    if "check alone" not in seen:
        print("  (no rewarder.local_peer here: code from before the peer check)")
    print(f"  load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
