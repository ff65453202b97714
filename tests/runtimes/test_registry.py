"""``runtimes.registry``: the catalogue the agent registers, and unknown ids answered briefly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtimes import known_names, registry
from runtimes.errors import LIST_COMMAND, MAX_SUGGESTIONS, UnknownEnvironment, closest_ids

ROOT = Path(__file__).parents[2]


def test_the_catalogue_names_what_the_runtimes_serve() -> None:
    """The catalogue's naming rules and lists agree with the families' own, family by family."""
    served = registry.env_ids()
    listed = registry.catalogue()
    for family in registry.FAMILIES:
        if family in registry.missing:
            continue  # not installed here: nothing to compare
        ours = {i for i in listed if i.startswith(family + ".")}
        theirs = {i for i in served if i.startswith(family + ".")}
        if family == "x11":  # the catalogue also names programs this machine lacks
            from runtimes import x11

            assert ours == {f"x11.{name}-v0" for name in x11.PROGRAMS} | {x11.X11Command.env_id}
            assert theirs <= ours
        else:
            assert ours == theirs, family


def test_the_catalogue_imports_no_family() -> None:
    """Listing ids must not load ale-py, miniwob or a runtime module that needs a program."""
    code = (
        "import sys; from runtimes import registry; ids = registry.catalogue(); "
        "print(len(ids), sorted(m for m in sys.modules if m.startswith(('ale_py', 'miniwob', "
        "'runtimes.atari', 'runtimes.browser', 'runtimes.x11'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    ).stdout.split(" ", 1)
    assert int(out[0]) > len(registry.LISTERS)
    assert out[1].strip() == "[]"


@pytest.mark.parametrize(
    ("asked", "best"),
    [
        ("atari.Pongg-v0", "atari.Pong-v0"),
        ("atari.pong-v0", "atari.Pong-v0"),
        ("pong", "atari.Pong-v0"),
        ("builtin.Catch-v1", "builtin.Catch-v0"),
        ("miniwob.click-test", "miniwob.ClickTest-v0"),
    ],
)
def test_closest_ids_put_the_meant_one_first(asked: str, best: str) -> None:
    assert closest_ids(asked, registry.catalogue())[0] == best


def test_an_unknown_id_is_answered_with_a_few_close_ones() -> None:
    with pytest.raises(UnknownEnvironment) as caught:
        registry.lookup("atari.SpaceInvader-v0")
    message = str(caught.value)
    assert "did you mean atari.SpaceInvaders-v0" in message
    assert f"`{LIST_COMMAND}`" in message
    assert 0 < len(caught.value.suggestions) <= MAX_SUGGESTIONS
    named = [i for i in registry.env_ids() if i in message]
    assert len(named) <= MAX_SUGGESTIONS, "the message lists ids nobody asked for"


def test_nothing_close_is_suggested_as_nothing() -> None:
    with pytest.raises(UnknownEnvironment) as caught:
        registry.lookup("xyzzy")
    assert caught.value.suggestions == []
    assert "did you mean" not in str(caught.value) and LIST_COMMAND in str(caught.value)


def test_serve_answers_a_mistyped_id_in_a_few_lines() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "universe_remote", "serve", "builtin.Cacth-v0", "--rewarder-port", "0",
         "--vnc-port", "0"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    assert result.returncode == 2
    assert "did you mean builtin.Catch-v0?" in result.stderr
    assert LIST_COMMAND in result.stderr
    assert "atari.Pong-v0" not in result.stderr  # not the whole list
    assert len(result.stderr) < 500, result.stderr


# One count, one message (issue 34) -------------------------------------------------------


def _printed_by_list() -> int:
    listed = subprocess.run([sys.executable, "-m", "universe_remote", "list"], capture_output=True,
                            text=True, timeout=120, check=True)
    return len(listed.stdout.splitlines())


def test_every_refusal_counts_what_list_prints() -> None:
    """serve, start_local, start_ray, gymnasium.make's env_id= and an env's env_id= each
    say "`universe-remote list` prints all N": N is the number of lines it prints."""
    from remotes import registration, start_local
    from remotes.options import check_env_id
    from remotes.ray import start_ray

    count = f"prints all {_printed_by_list()})"
    refusals = []
    for refuse in (lambda: registry.lookup("nosuch.Game-v0"), lambda: start_local("nosuch.Game-v0"),
                   lambda: start_ray("nosuch.Game-v0"), lambda: check_env_id("nosuch.Game-v0", []),
                   lambda: registration.make_env("nosuch.Game-v0")):
        with pytest.raises(UnknownEnvironment) as caught:
            refuse()
        refusals.append(str(caught.value))
    served = subprocess.run([sys.executable, "-m", "universe_remote", "serve", "nosuch.Game-v0"],
                            capture_output=True, text=True, timeout=120)
    refusals.append(served.stderr)
    assert all(count in refusal for refusal in refusals), (count, refusals)


def test_a_family_not_installed_is_named_with_its_install_line_everywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without ale-py (its package not found), the Atari ids are still listed (remotes
    elsewhere serve them: runtimes.known_names), and start_local of one says first what to
    install, in the words serve uses."""
    from remotes import start_local
    from remotes.options import check_env_id

    real = registry._package_dir
    monkeypatch.setattr(registry, "_package_dir", lambda name: None if name == "ale_py" else real(name))
    install = ("atari.Pong-v0 cannot be served on this machine: install it first: pip install "
               "'universe-remote[atari]' (No module named 'ale_py')")
    with pytest.raises(UnknownEnvironment, match="prints all") as caught:
        start_local("atari.Pong-v0")
    assert str(caught.value).startswith(install), caught.value
    assert "did you mean" not in str(caught.value)
    check_env_id("atari.Pong-v0", [])  # a remote elsewhere may serve it: it is a real id
    assert "atari.Pong-v0" in registry.catalogue()
    assert registry.missing_hint("builtin.Catch-v0") is None


def test_the_known_names_are_the_installed_packages_names() -> None:
    """runtimes.known_names lists what the installed ale-py and miniwob ship: the ids an
    agent without them registers are the ids a remote with them serves."""
    for package, names, where, suffix in (("ale_py", known_names.ATARI_ROMS, "roms", ".bin"),
                                          ("miniwob", known_names.MINIWOB_PAGES, "html/miniwob", ".html")):
        found = registry._package_dir(package)
        if found is None:
            pytest.skip(f"{package} is not installed")
        assert sorted(p.name.removesuffix(suffix) for p in (found / where).glob(f"*{suffix}")) == list(names)


def test_a_missing_program_is_what_the_message_says_to_install_first(tmp_path: Path) -> None:
    """A MiniWoB id where Chromium is not on PATH (its Python package installed): serve says
    first to install Chromium, without "no such environment", ids that would fail the same
    way, or a pip install of what is installed."""
    if registry._package_dir("miniwob") is None or shutil.which("Xvnc") is None:
        pytest.skip("miniwob or Xvnc is not installed")
    (tmp_path / "Xvnc").symlink_to(shutil.which("Xvnc"))  # type: ignore[arg-type]
    env = {k: v for k, v in os.environ.items() if k != "UNIVERSE_REMOTE_CHROMIUM"}
    served = subprocess.run([sys.executable, "-m", "universe_remote", "serve", "miniwob.ClickTest-v0"],
                            capture_output=True, text=True, timeout=120, env={**env, "PATH": str(tmp_path)})
    assert served.returncode == 2
    assert served.stderr.startswith(
        "universe-remote: miniwob.ClickTest-v0 cannot be served on this machine: install chromium "
        "first: apt-get install chromium (or, in a checkout of universe-remote, "
        "scripts/install-system-packages"), served.stderr
    assert not any(words in served.stderr for words in ("no such environment", "did you mean", "pip install"))


def test_an_id_listed_but_not_served_here_says_why_not_did_you_mean_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """x11.XTerm-v0 where xterm is not installed: listed (the count stays list's), refused
    by serve with the reason, never "did you mean x11.XTerm-v0?"."""
    served = dict(registry._family("x11"))
    served.pop("x11.XTerm-v0", None)
    monkeypatch.setitem(registry._loaded, "x11", served)
    with pytest.raises(UnknownEnvironment) as caught:
        registry.lookup("x11.XTerm-v0")
    message = str(caught.value)
    assert "its program is not on this machine" in message and "did you mean x11.XTerm-v0" not in message
    assert f"prints all {len(registry.catalogue())})" in message
