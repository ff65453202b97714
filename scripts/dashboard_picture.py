"""Make the README's dashboard picture from a real run: 8 Catch remotes played by
``universe-remote play --dashboard``, shot by headless Chromium at 1280x800 once every
remote has finished episodes (so the chart has lines and the cards count past episode 1).

    .venv/bin/python scripts/dashboard_picture.py [OUT]      # default docs/img/dashboard.png

Needs Chromium. Binds 127.0.0.1 only, on free ports.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
#: Where the README takes the picture from.
DEFAULT_OUT: Final = ROOT / "docs" / "img" / "dashboard.png"
#: The browser window the picture shows: a laptop's.
WINDOW: Final = (1280, 800)
#: Remotes on the dashboard.
REMOTES: Final = 8
#: Episodes every remote must have finished before the shot.
EPISODES: Final = 2
#: Seconds play runs at most (it is stopped once the shot is taken).
PLAY_SECONDS: Final = 300
#: Seconds to wait for the dashboard's address, for the episodes, and for Chromium.
TIMEOUT: Final = 240.0
#: Seconds between two looks at the dashboard's state.
POLL: Final = 1.0
#: Milliseconds of page time Chromium lets pass before the shot: polls and frames drawn.
PAGE_TIME_MS: Final = 4000


def _dashboard_url(play: subprocess.Popen[str]) -> str:
    assert play.stdout is not None
    for line in play.stdout:
        if found := re.search(r"dashboard: (http://127\.0\.0\.1:\d+/)", line):
            return found[1]
    raise RuntimeError(f"play printed no dashboard address (exit {play.wait()})")


def _wait_for_episodes(url: str) -> None:
    """Until every remote has finished :data:`EPISODES` episodes (asked of state.json)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url + "state.json", timeout=10) as response:
            remotes = json.load(response)["remotes"]
        if len(remotes) == REMOTES and all(r["episodes"] >= EPISODES for r in remotes):
            return
        time.sleep(POLL)  # polling a live server: nothing to wait on but its answers
    raise RuntimeError(f"the remotes did not finish {EPISODES} episodes within {TIMEOUT:g} s")


def main(out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    play = subprocess.Popen(
        [sys.executable, "-m", "universe_remote", "play", "builtin.Catch-v0", "-n", str(REMOTES),
         "--dashboard", "0", "--seconds", str(PLAY_SECONDS)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        url = _dashboard_url(play)
        _wait_for_episodes(url)
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                 f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                 f"--virtual-time-budget={PAGE_TIME_MS}", f"--screenshot={out}", url],
                check=True, timeout=TIMEOUT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
    finally:
        play.terminate()
        play.wait(TIMEOUT)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else DEFAULT_OUT))
