"""``python -m benchmarks [NAME ...]``: run every benchmark module (or the named ones)."""

from __future__ import annotations

import importlib
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

#: Benchmark modules in the order they run; each has ``main() -> None``.
MODULES = [
    "rewarder_throughput", "remotes_realtime", "vnc_server", "vnc_client", "atari_lockstep",
    "viewer_port", "long_step",
]


def main(argv: list[str]) -> int:
    for name in argv or MODULES:
        module = importlib.import_module(f"benchmarks.{name}")
        print(f"== {name}: {module.__doc__.strip().splitlines()[0]}", flush=True)
        module.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
