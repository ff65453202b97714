"""``python -m fuzz [--rewarder N] [--rfb N] [--seed S]``: fuzz two real remotes for long.

Starts ``universe-remote serve builtin.Catch-v0`` twice as subprocesses (lockstep for the
rewarder run, real time for the RFB run, so a healthy viewer always has new frames),
fuzzes each, and prints the counts and each remote's RSS growth. Exits 1 if anything
crashed, hung or went unanswered. ``make fuzz`` runs it with the defaults: 1,000,000
rewarder messages and 100,000 RFB messages.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from fuzz import rewarder, rfb  # noqa: E402
from remotes.local import start_local  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--rewarder", type=int, default=1_000_000, help="rewarder messages")
    parser.add_argument("--rfb", type=int, default=100_000, help="RFB client messages")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # Writing to a connection the server just closed is what RFB fuzzing does; quiet.
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    failed = False
    for name, count, mode in (("rewarder", args.rewarder, "lockstep"),
                              ("rfb", args.rfb, "realtime")):
        with start_local("builtin.Catch-v0", 1, extra_args=["--mode", mode]) as local:
            pid = local.processes[0].pid
            address = local.addresses[0]
            before, started = rss_kib(pid), time.perf_counter()
            counts: rewarder.Counts | rfb.Counts
            if name == "rewarder":
                assert address.rewarder_port is not None
                counts = asyncio.run(rewarder.run(address.rewarder_port, count, args.seed))
            else:
                assert address.vnc_port is not None
                counts = asyncio.run(rfb.run(address.vnc_port, count, args.seed))
            took = time.perf_counter() - started
            alive = local.processes[0].poll() is None
            growth = rss_kib(pid) - before if alive else 0
        result = asdict(counts)
        print(f"{name}: {result}; {counts.messages / took:,.0f} messages/s over {took:.0f} s; "
              f"remote RSS growth {growth:,} KiB; remote {'alive' if alive else 'DEAD'}")
        bad = (result.get("unanswered", 0) + result.get("hangs", 0) + result.get("crashes", 0))
        failed |= bad > 0 or not alive
    print("fuzz: " + ("FAILED" if failed else "no crash, hang or unanswered request"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
