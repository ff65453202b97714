"""``python -m benchmarks [NAME ...]``: run every benchmark module (or the named ones)."""

from __future__ import annotations

import importlib
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

#: Benchmark modules in the order they run; each has ``main() -> None``.
MODULES = [
    "rewarder_throughput", "remotes_realtime", "realtime_cpu", "vnc_server", "vnc_client",
    "display_capture", "browser_remotes", "atari_lockstep",
    "lockstep_peers", "step_channel", "viewer_port", "long_step", "dm_env_rpc_port", "recording",
    "ray_remotes",
    "multiagent",
]


def main(argv: list[str]) -> int:
    names = argv or MODULES
    began = time.monotonic()
    for i, name in enumerate(names, 1):
        module = importlib.import_module(f"benchmarks.{name}")
        doc = (module.__doc__ or "").strip().splitlines()
        print(f"== [{i}/{len(names)}] {name}: {doc[0] if doc else ''}", flush=True)
        started = time.monotonic()
        module.main()
        print(f"   ({name} took {time.monotonic() - started:.0f} s; "
              f"{time.monotonic() - began:.0f} s so far)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
