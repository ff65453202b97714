"""``serve --option KEY=VALUE``: the runtime's keyword arguments from the command line, kept
for the envs a reset switches to, and the values in force in the describe."""

from __future__ import annotations

import pytest

from envserver.cli import serve_config
from envserver.remote import Remote
from universe_remote.cli import build_parser


def parsed(*words: str) -> dict[str, object] | None:
    return serve_config(build_parser().parse_args(["serve", "atari.Pong-v0", *words])).runtime_options


def test_options_are_typed_from_their_text() -> None:
    assert parsed() is None
    assert parsed(
        "--option", "repeat_action_probability=0.25", "--option", "full_action_space=true",
        "--option", "noop_max=0", "--option", "name=text", "--scale", "2",
    ) == {
        "repeat_action_probability": 0.25, "full_action_space": True, "noop_max": 0, "name": "text",
        "scale": 2,
    }
    assert parsed("--option", "full_action_space=False") == {"full_action_space": False}


@pytest.mark.parametrize("bad", ["no-equals", "=1", "two words=1"])
def test_a_malformed_option_is_refused(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parsed("--option", bad)
    assert "KEY=VALUE" in capsys.readouterr().err


def test_an_atari_remote_runs_its_options_and_describes_them() -> None:
    pytest.importorskip("ale_py")
    remote = Remote("atari.Pong-v0", runtime_options={
        "repeat_action_probability": 0.25, "full_action_space": True, "noop_max": 0,
    })
    described = remote.describe()
    assert described["repeat_action_probability"] == 0.25 and described["noop_max"] == 0
    assert described["full_action_space"] is True and len(described["actions"]) == 18
    assert described["lives"] == 0
