"""A small tmpfs of the test's own, to fill: what a full disk (or a full ``/dev/shm``) does.

``tiny_tmpfs(path, size)`` mounts a tmpfs of ``size`` at ``path`` (root only: the test is
skipped elsewhere) and unmounts it after; ``fill(directory)`` writes a file there until
the filesystem says ENOSPC and returns it (delete it to make room again).
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tiny_tmpfs(path: Path, size: str = "1m") -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root only): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def fill(directory: Path) -> Path:
    """A file in ``directory`` that takes every byte its filesystem has left."""
    filler = directory / "filler"
    block = bytes(4096)
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                if not f.write(block):
                    break
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    return filler
