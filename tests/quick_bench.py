"""Runs one benchmark's quick round the way ``make bench-quick`` does, for the tests that
check what a benchmark prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]


def quick_round(name: str, timeout: float) -> str:
    """``python -m benchmarks --quick NAME``'s output, once it exited 0 within ``timeout``."""
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", name], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
