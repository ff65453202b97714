"""Make the README's pictures from real runs: TigerVNC's viewer and the browser viewer,
each on a virtual X screen, captured with xwd (the dashboard's: scripts/dashboard_picture.py).

    .venv/bin/python scripts/screenshots.py [OUT_DIR]      # default docs/img

Needs Xvfb, xwd, netpbm, TigerVNC's vncviewer, xdotool and Chromium (``make test``
installs them). Binds 127.0.0.1 only, on free ports.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
#: The virtual screen's size.
SCREEN: Final = (1280, 800)
#: Seconds to wait for a window, a banner, or a page to draw.
TIMEOUT: Final = 30.0
#: Seconds a page or viewer gets to draw its first frames before the capture.
SETTLE: Final = 3.0


def _free_display() -> int:
    for number in range(90, 200):
        if not Path(f"/tmp/.X11-unix/X{number}").exists() and not Path(f"/tmp/.X{number}-lock").exists():
            return number
    raise RuntimeError("no free X display number in 90..199")


@contextmanager
def _process(args: list[str], **kwargs: object) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(args, text=True, **kwargs)  # type: ignore[call-overload]
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _read_until(proc: subprocess.Popen[str], pattern: str) -> re.Match[str]:
    assert proc.stdout is not None
    deadline = time.monotonic() + TIMEOUT
    for line in proc.stdout:
        if found := re.search(pattern, line):
            return found
        if time.monotonic() > deadline:
            break
    raise RuntimeError(f"{proc.args[:3]} never printed {pattern!r}")


def _window(display: str, name: str) -> str:
    """The id of the first visible window whose name matches ``name`` (waits for it)."""
    done = subprocess.run(
        ["xdotool", "search", "--sync", "--onlyvisible", "--name", name],
        env={"DISPLAY": display}, capture_output=True, text=True, timeout=TIMEOUT, check=True,
    )
    return done.stdout.split()[0]


def _capture(display: str, window: str, path: Path) -> None:
    xwd = subprocess.run(["xwd", "-silent", "-id", window], env={"DISPLAY": display},
                         capture_output=True, timeout=TIMEOUT, check=True).stdout
    pnm = subprocess.run(["xwdtopnm"], input=xwd, capture_output=True, timeout=TIMEOUT, check=True).stdout
    path.write_bytes(subprocess.run(["pnmtopng"], input=pnm, capture_output=True,
                                    timeout=TIMEOUT, check=True).stdout)
    print(f"wrote {path}")


def _chromium(display: str, url: str, profile: str) -> list[str]:
    return ["chromium", "--no-sandbox", "--test-type", "--no-first-run", "--disable-gpu", "--disable-sync",
            "--disable-component-update", f"--user-data-dir={profile}", f"--app={url}",
            f"--window-size={SCREEN[0]},{SCREEN[1]}", "--window-position=0,0"]


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    number = _free_display()
    display = f":{number}"
    env = {"DISPLAY": display, "PATH": "/usr/bin:/bin:/usr/local/bin"}
    serve = [sys.executable, "-m", "universe_remote", "serve"]
    with (
        _process(["Xvfb", display, "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24", "-nolisten", "tcp"]),
        tempfile.TemporaryDirectory() as tmp,
        _process([*serve, "atari.Pong-v0", "--scale", "2", "--vnc-port", "0", "--rewarder-port", "0",
                  "--http-port", "0"], stdout=subprocess.PIPE) as remote,
    ):
        vnc = _read_until(remote, r"VNC\s+127\.0\.0\.1:(\d+)").group(1)
        viewer = _read_until(remote, r"viewer\s+(http://\S+/viewer/)").group(1)
        with _process(["vncviewer", f"127.0.0.1::{vnc}"], env=env):
            window = _window(display, "atari.Pong-v0|TigerVNC")
            time.sleep(2 * SETTLE)  # frames of the game, and its "F8" hint gone (a capture, not a sync)
            _capture(display, window, out / "vncviewer.png")
        with _process(_chromium(display, viewer, f"{tmp}/viewer"), env=env,
                      stderr=subprocess.DEVNULL):
            window = _window(display, "universe-remote")
            time.sleep(SETTLE)
            _capture(display, window, out / "browser-viewer.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "img"))
