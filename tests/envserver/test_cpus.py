"""``serve --cpus`` (envserver/cpus.py): the list's form, and CPUs this process may not
use refused before anything binds. That the processes run pinned, every thread of them,
and stay pinned across a restart: tests/remotes/test_local.py."""

from __future__ import annotations

import os

import pytest

from envserver import games
from envserver.cpus import MAX_CPU, parse_cpus
from universe_remote.cli import main


def test_a_cpu_list_reads_as_tasksets_does() -> None:
    assert parse_cpus("0-3,6") == {0, 1, 2, 3, 6}
    assert parse_cpus(" 1 , 3") == {1, 3}
    assert parse_cpus("2-2,2") == {2}
    for wrong, said in (("", "not a CPU number"), ("a", "not a CPU number"), ("0-x", "not a CPU number"),
                        ("3-1", "a range's first one first"), (str(MAX_CPU + 1), f"0..{MAX_CPU}"),
                        ("-1", "not a CPU number")):
        with pytest.raises(ValueError, match=said):
            parse_cpus(wrong)


def test_serve_refuses_cpus_it_may_not_run_on_before_it_serves(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[object] = []
    monkeypatch.setattr(games, "run", lambda *args: calls.append(args) or 0)
    outside = max(set(range(MAX_CPU + 1)) - os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    assert main(["serve", "builtin.Catch-v0", "--cpus", str(outside)]) == 2
    err = capsys.readouterr().err
    assert f"may not run on CPU {outside}; it may on " in err
    assert calls == [] and os.sched_getaffinity(0) == before
    with pytest.raises(SystemExit) as exited:
        main(["serve", "builtin.Catch-v0", "--cpus", "1-0"])
    assert exited.value.code == 2
    assert "argument --cpus: '1-0'" in capsys.readouterr().err and calls == []
