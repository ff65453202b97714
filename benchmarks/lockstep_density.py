"""Lockstep games per process: RemoteVectorEnv lockstep Pong over K games to a process.

Issue 32's question for ``start_local``'s default: when n lockstep remotes exceed the
cores, the remotes' CPU is the floor of a vector step; does serving K games in one
``serve`` process (``serve --games K``: one event loop, one wake-up for all of them)
beat one process per remote there? For n = 8 and n = 4 Pong remotes (frameskip 4, an
RGB frame every step through shared memory, random actions) and K = 1, 2, 4, 8 (K <= n;
``start_local(games_per_process=K)``), ``RemoteVectorEnv(mode="lockstep")`` steps
:data:`~benchmarks.atari_common.VECTOR_STEPS` vector steps: env-steps/s, the agent's and
the remotes' CPU per env-step, and each K against K = 1 (one process per remote, today's
default up to ``SEPARATE_UNTIL`` remotes). gymnasium's AsyncVectorEnv at the same n is
the reference row. The medians of :data:`ROUNDS` rounds (the machine may be shared);
nothing is scaled. This measures; the default is chosen from it by hand.
"""

from __future__ import annotations

import multiprocessing
import statistics
from typing import Any, Final

from benchmarks.atari_common import ENV_ID, FRAMESKIP
from benchmarks.atari_lockstep import measure_vector_async, measure_vector_ours
from benchmarks.common import quick, ratio, table

#: Remotes in the vector, and the games per process tried for each.
COUNTS: Final = quick((8, 4), (4,))
GAMES: Final = quick((1, 2, 4, 8), (1, 4))
#: Rounds of each row (the median is printed).
ROUNDS: Final = quick(2, 1)


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    multiprocessing.set_forkserver_preload(["numpy", "gymnasium", "ale_py"])
    for n in COUNTS:
        ks = [k for k in GAMES if k <= n]
        runs: dict[int, list[dict[str, float]]] = {k: [] for k in ks}
        theirs: list[dict[str, float]] = []
        for _ in range(ROUNDS):  # rows take turns, so a busy spell does not hit one row
            for k in ks:
                runs[k].append(measure_vector_ours(n, "raw", games_per_process=k))
            theirs.append(measure_vector_async(n))
        by_k = {k: _median(v) for k, v in runs.items()}
        reference = _median(theirs)
        one = by_k[ks[0]]["steps_per_s"]
        rows: list[list[Any]] = []
        for k in ks:
            r = by_k[k]
            rows.append([
                f"K={k} ({-(-n // k)} process{'es' if -(-n // k) > 1 else ''})",
                f"{r['steps_per_s'] * n:,.0f}", ratio(r["steps_per_s"], one),
                ratio(r["steps_per_s"], reference["steps_per_s"]),
                f"{r['own_cpu'] / n * 1e6:.0f} us", f"{r['others_cpu'] / n * 1e6:.0f} us",
                f"{r['start']:.1f} s",
            ])
        rows.append([f"gymnasium AsyncVectorEnv n={n}", f"{reference['steps_per_s'] * n:,.0f}",
                     "", "1.00x", f"{reference['own_cpu'] / n * 1e6:.0f} us",
                     f"{reference['others_cpu'] / n * 1e6:.0f} us", f"{reference['start']:.1f} s"])
        print(f"\n  RemoteVectorEnv lockstep over n={n} {ENV_ID} remotes, K games per serve "
              f"process (frameskip {FRAMESKIP}, shared-memory frames; median of {ROUNDS})")
        table(["", "env-steps/s", "vs K=1", "vs AsyncVectorEnv", "agent CPU/env-step",
               "remotes' CPU/env-step", "start"], rows)
        best = max(ks, key=lambda k: by_k[k]["steps_per_s"])
        print(f"  fastest here: K={best} ({ratio(by_k[best]['steps_per_s'], one)} one process "
              "per remote)")


if __name__ == "__main__":
    main()
