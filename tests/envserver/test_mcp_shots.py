"""How much of the screen an answer carries (envserver.computer_use.shots, sans-I/O); the
same through MCP on a real desktop is tests/envserver/test_mcp_desktop.py."""

from __future__ import annotations

import numpy as np
import pytest

from envserver.computer_use.errors import ToolError
from envserver.computer_use.shots import changed_box, shot_mode


def test_the_changed_box_is_the_tightest_one_and_none_when_still() -> None:
    before = np.zeros((60, 80, 3), np.uint8)
    after = before.copy()
    assert changed_box(before, after) is None
    after[10, 20, 1] = 5
    after[30, 7, 0] = 9
    assert changed_box(before, after) == (7, 10, 21, 31)  # x1, y1 excluded
    assert changed_box(None, after) == (0, 0, 80, 60)
    assert changed_box(np.zeros((10, 10, 3), np.uint8), after) == (0, 0, 80, 60)  # another size


def test_modes() -> None:
    assert [shot_mode(v) for v in (True, False, "full", "changed", "none")] == [
        "full", "none", "full", "changed", "none"]
    with pytest.raises(ToolError, match="full .* changed .* none"):
        shot_mode("diff")
