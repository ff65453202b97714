"""Helpers for the recording tests: ``serve --record`` as a child process, and a local
re-run of a recorded episode."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from recordings import Episode
from recordings.format import frame_hash
from runtimes import registry
from runtimes.base import KeyEvent, PlayerEvent, PointerEvent

#: Seconds any one wait may take.
TIMEOUT = 30.0


@dataclass
class Served:
    process: asyncio.subprocess.Process
    vnc_port: int
    rewarder_port: int

    @property
    def rewarder(self) -> str:
        return f"127.0.0.1:{self.rewarder_port}"


@asynccontextmanager
async def serve(*args: str, command: str = "serve") -> AsyncIterator[Served]:
    """``universe-remote serve ARGS`` (or ``command``) on free ports, until its banner;
    stopped (SIGTERM, unless the test killed it) after."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "universe_remote", command, *args, "--rewarder-port", "0",
        "--vnc-port", "0", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    banner = ""
    try:
        async with asyncio.timeout(TIMEOUT):
            while "Ctrl-C to stop" not in banner:
                line = (await process.stdout.readline()).decode()
                if not line:
                    raise AssertionError(f"serve ended: {(await process.stderr.read()).decode()}")  # type: ignore[union-attr]
                banner += line
        vnc, rewarder = re.search(r"vnc://127\.0\.0\.1:(\d+)\+(\d+)", banner).groups()  # type: ignore[union-attr]
        yield Served(process, int(vnc), int(rewarder))
    finally:
        if process.returncode is None:
            process.terminate()
        async with asyncio.timeout(TIMEOUT):
            await process.communicate()


def rerun(episode: Episode) -> list[str]:
    """Run the recorded env afresh under the episode's seed with its recorded input, step
    by step; the frame hashes it draws (equal to the recorded ones iff every event was
    recorded on the frame it applied to)."""
    runtime = registry.lookup(episode.env_id)()
    runtime.reset(episode.seed)
    hashes = [frame_hash(runtime.framebuffer)]
    for step in episode.steps[1:]:
        events: list[Any] = [
            KeyEvent(*e.args) if e.kind == "KeyEvent" else PointerEvent(*e.args)
            for e in step.events
        ]
        events = [PlayerEvent(e.player, ev) if e.player else ev
                  for e, ev in zip(step.events, events, strict=True)]
        runtime.advance(events, step.frames)
        hashes.append(frame_hash(runtime.framebuffer))
    return hashes
