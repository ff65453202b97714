"""The X desktop's folder (runtimes.desktop_io.Sandbox): names resolve inside it or are
refused saying why; the size limits hold. The round trips through MCP with a real
program are tests/envserver/test_mcp_desktop.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtimes import desktop_io
from runtimes.desktop_io import MAX_PUT_BYTES, DeskRefused, Sandbox


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    (tmp_path / "box").mkdir()
    return Sandbox(tmp_path / "box")


@pytest.mark.parametrize("name", ["../x", "/etc/hostname", "a/../../x", "..", "", "a\0b", 7, "x" * 300])
def test_names_outside_or_malformed_are_refused(sandbox: Sandbox, name: object) -> None:
    with pytest.raises(DeskRefused, match="path"):
        sandbox.path(name)


def test_a_link_that_leads_out_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("no")
    (sandbox.root / "link").symlink_to(tmp_path / "secret")
    (sandbox.root / "dir").symlink_to(tmp_path)
    for name in ("link", "dir/secret"):
        with pytest.raises(DeskRefused, match="through a link"):
            sandbox.get(name)
    with pytest.raises(DeskRefused, match="through a link"):
        sandbox.put("dir/new", b"x")
    assert not (tmp_path / "new").exists()
    assert sandbox.listing() == []  # links are not listed as files


def test_put_get_list_clear_and_the_limits(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    assert sandbox.put("a/b.txt", b"hi") == 2
    assert sandbox.get("a/b.txt") == b"hi"
    assert sandbox.listing() == [{"path": "a/b.txt", "bytes": 2}]
    with pytest.raises(DeskRefused, match=f"at most {MAX_PUT_BYTES} bytes"):
        sandbox.put("big", bytes(MAX_PUT_BYTES + 1))
    with pytest.raises(DeskRefused, match="is a folder"):
        sandbox.put("a", b"x")
    with pytest.raises(DeskRefused, match="not there.*a/b.txt"):
        sandbox.get("missing.txt")
    monkeypatch.setattr(desktop_io, "MAX_FOLDER_BYTES", 10)
    sandbox.put("a/b.txt", bytes(10))  # replacing a file counts its new size only
    with pytest.raises(DeskRefused, match="more than 10 bytes"):
        sandbox.put("c", b"x")
    monkeypatch.setattr(desktop_io, "MAX_GET_BYTES", 5)
    with pytest.raises(DeskRefused, match="at most 5"):
        sandbox.get("a/b.txt")
    sandbox.clear()
    assert sandbox.listing() == [] and sandbox.root.is_dir()
