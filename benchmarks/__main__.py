"""``python -m benchmarks [--quick [--all]] [--list] [NAME ...] [-- OPTIONS]``: run every benchmark module
(or the named ones), saying before each how long it is expected to take and after it how
long it took and how long the rest should. ``python -m benchmarks NAME -- OPTIONS`` gives
one benchmark its own options (``pool -- --churn-only --agents 64``), as ``python -m
benchmarks.NAME OPTIONS`` does.

``--quick`` (``make bench-quick``) runs one short round (module constants read
:func:`benchmarks.common.quick`) of the :data:`HEADLINES`, one benchmark per area, for
the ratios in a few minutes, not the figures the docs quote; ``--quick --all`` a short
round of every one. Without ``--quick`` every module of this folder with a ``main()`` runs
(:data:`ORDER` first, any other after it), so a new benchmark is never left out.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from benchmarks.common import QUICK_ENV  # noqa: E402

#: The order benchmarks run in; modules found beside them that are not listed run after.
ORDER: Final = (
    "rewarder_throughput", "remotes_realtime", "realtime_cpu", "vnc_server", "vnc_client",
    "display_capture", "browser_remotes", "atari_lockstep", "lockstep_peers", "busy_core", "lockstep_density",
    "autoreset_lane", "step_channel", "viewer_port", "long_step", "dm_env_rpc_port", "recording",
    "openenv_port", "page_structure", "browser_oracle", "ray_remotes", "multiagent",
)
#: ``make bench-quick``'s set: one headline ratio per area, short enough together for
#: :data:`QUICK_BUDGET` (the rest stays in ``make bench``).
HEADLINES: Final = (
    "rewarder_throughput",  # the rewarder's wire
    "remotes_realtime",  # real-time remotes against their fps
    "vnc_client",  # the pixel channel
    "step_channel",  # the lockstep step, one remote
    "lockstep_peers",  # lockstep vectors against ale-py's and gymnasium's
    "dm_env_rpc_port",  # the dm_env_rpc front end
    "page_structure",  # what web agents read
    "browser_remotes",  # browser remotes in both modes
    "recording",  # recordings against FFV1
    "multiagent",  # several agents in one world
    "snapshots",  # clone/restore against ale-py
    "mcp_agent",  # computer-use agents: settled screenshots against fixed sleeps
)
#: Seconds ``make bench-quick`` should take on a quiet 2-core machine (issue 45).
QUICK_BUDGET: Final = 300
#: Modules here that are parts of benchmarks, not benchmarks.
HELPERS: Final = frozenset({"common", "atari_common", "atari_breakdown", "pong_rows", "dm_peer", "turns",
                             "__main__"})
#: Seconds each took on the project's 2-core machine (full, quick): full runs from `make
#: bench` at 14:41 on 2026-11-26 (display_capture, browser_remotes, openenv_port and
#: page_structure, added since, run alone at 15:50-16:53), quick ones from `make
#: bench-quick` at 16:40, beside other work (load average 5); a module not listed is "not
#: measured yet".
EXPECTED: Final[dict[str, tuple[float, float]]] = {
    "rewarder_throughput": (9, 1),
    "remotes_realtime": (75, 11),
    "realtime_cpu": (100, 14),
    "vnc_server": (66, 6),
    "vnc_client": (68, 9),
    "display_capture": (75, 12),
    "browser_remotes": (282, 34),
    "atari_lockstep": (62, 21),
    "lockstep_peers": (130, 15),  # (2026-12-07 session fourteen: vector rows in turns, 40 s each n)
    "busy_core": (100, 27),  # (2026-12-08 session sixteen: three phases of 25 s in turns)
    # measured 2026-11-29 01:07-01:09 beside three other helpers' work (load average 5-11)
    "lockstep_density": (126, 5),
    # measured 2026-11-29 02:45-02:55, quiet but for the coordinator's short test runs
    "autoreset_lane": (18, 3),
    "step_channel": (36, 6),
    "viewer_port": (151, 17),
    "long_step": (2, 1),
    "dm_env_rpc_port": (24, 5),
    "recording": (111, 19),
    "openenv_port": (82, 24),
    "page_structure": (109, 6),
    "browser_oracle": (400, 135),  # measured alone at 17:00 (its helper's two runs)
    # its helper's runs, alone, 17:00-17:40; + part overload (issue 44: ~5 min, quick ~20 s,
    # h44density's runs beside other helpers' work)
    "density": (600, 80),
    "ray_remotes": (50, 26),
    "multiagent": (5, 2),
    # the fifth wave's, from their helpers' runs beside other work (load average 6-30):
    # slower than on a quiet machine
    "web_front_ends": (200, 77),
    "browser_lockstep": (480, 120),
    "browser_switch": (27, 15),
    "browser_density": (260, 90),
    # the sixth wave's lead, beside eight helpers' work (load average 8-18): slower than on
    # a quiet machine
    "snapshots": (26, 5),
    "browser_snapshots": (128, 9),
    "mcp_agent": (154, 49),
    "settle_latency": (560, 218),
    # measured 2026-12-06 06:44-06:45 beside other helpers' work (load average 9-12)
    "twin_connect": (11, 3),
    # issue 43's helper h43eval, 2026-12-06, beside other helpers' work (load average 14-16)
    "eval_harness": (67, 23),
    # issue 44's warm pool: three full runs and a quick one beside other helpers' work
    # (load 11-24)
    "pool": (200, 55),
    # 2026-12-07 08:31, quiet (load average 0.3)
    "doorbell": (27, 2),
    # 2026-12-07 12:12, quiet (load average 0.2); quick at 12:11
    "frames_in_place": (70, 5),
}


def discover() -> list[str]:
    """Every benchmark module here (one with a top-level ``main()``; read, not imported),
    in :data:`ORDER` and then by name."""
    here = Path(__file__).resolve().parent
    found = {m.name for m in pkgutil.iter_modules([str(here)]) if m.name not in HELPERS
             and re.search(r"^def main\(", (here / f"{m.name}.py").read_text(), re.MULTILINE)}
    return [n for n in ORDER if n in found] + sorted(found - set(ORDER))


def expected(name: str, quick: bool) -> float | None:
    """Seconds ``name`` is expected to take, or None when it was never measured."""
    times = EXPECTED.get(name)
    return None if times is None else times[1 if quick else 0]


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def chosen(names: list[str], quick: bool, every: bool, available: list[str]) -> list[str]:
    """What runs: the named ones; else with ``--quick`` the headlines (all with ``--all``);
    else all of them."""
    if names:
        return names
    if quick and not every:
        return [n for n in HEADLINES if n in available]
    return available


def total(names: list[str], quick: bool) -> float:
    """The expected seconds of the ones measured (what the README and Makefile quote)."""
    return sum(t for n in names if (t := expected(n, quick)) is not None)


def plan(names: list[str], quick: bool) -> str:
    """The opening line: how many, how long, and which were never measured."""
    unknown = [n for n in names if expected(n, quick) is None]
    kind = "quick rounds of " if quick else ""
    more = f" plus {', '.join(unknown)} (not measured yet)" if unknown else ""
    quick_note = "" if quick else "; make bench-quick runs a short round of the headline ones"
    return (f"running {kind}{len(names)} benchmarks: expected about {_duration(total(names, quick))}{more} "
            f"on a 2-core machine{quick_note}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these modules")
    parser.add_argument("--quick", action="store_true", help="one short round of each")
    parser.add_argument("--all", action="store_true",
                        help="with --quick: a short round of every benchmark, not only the headlines")
    parser.add_argument("--list", action="store_true", help="print each with its expected time")
    argv, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(argv)
    if extra and len(args.names) != 1:
        parser.error("options after -- go to one benchmark: python -m benchmarks NAME -- OPTIONS")
    available = discover()
    unknown = [n for n in args.names if n not in available]
    if unknown:
        parser.error(f"no benchmark {', '.join(unknown)}; there are {', '.join(available)}")
    names = chosen(args.names, args.quick, args.all, available)
    if args.quick:  # before any module is imported: they read it into their constants
        os.environ[QUICK_ENV] = "1"
    if args.list:
        for name in names:
            full, short = expected(name, False), expected(name, True)
            print(f"{name:22} full {_duration(full) if full else '?':>8}   quick "
                  f"{_duration(short) if short else '?':>6}")
        print(plan(names, args.quick))
        return 0
    print(plan(names, args.quick), flush=True)
    began = time.monotonic()
    left = total(names, args.quick)
    failed = []
    for i, name in enumerate(names, 1):
        guess = expected(name, args.quick)
        about = f" (expected ~{_duration(guess)})" if guess is not None else ""
        started = time.monotonic()
        try:
            module = importlib.import_module(f"benchmarks.{name}")
            doc = (module.__doc__ or "").strip().splitlines()
            print(f"== [{i}/{len(names)}] {name}{about}: {doc[0] if doc else ''}", flush=True)
            sys.argv = [f"benchmarks.{name}", *extra]  # (a module with options reads them)
            module.main()
            outcome = "took"
        except Exception:  # one broken benchmark must not cost the others' figures
            traceback.print_exc()
            failed.append(name)
            outcome = "FAILED after"
        left -= guess or 0.0
        print(f"   ({name} {outcome} {_duration(time.monotonic() - started)}; "
              f"{_duration(time.monotonic() - began)} so far"
              + (f", about {_duration(left)} to go)" if i < len(names) else ")"), flush=True)
    if failed:
        print(f"failed: {', '.join(failed)} (tracebacks above)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
