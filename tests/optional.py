"""The parts of the suite beyond ``.[test]``, and the one way a test says it needs one.

A test that needs an extra or a program skips, naming what to install, when it is absent;
in CI, where ``make test`` installs everything, a skip fails the run (tests/conftest.py).
Call :func:`need_extra` before importing the extra's modules (at module level, then the
imports after it carry ``# noqa: E402``), or mark a test with :func:`needs_extra` /
:func:`needs_program`.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from typing import Final

import pytest

#: Each extra of pyproject.toml that tests use, and the modules that tell it is installed.
EXTRAS: Final[dict[str, tuple[str, ...]]] = {
    "atari": ("ale_py",),
    "browser": ("miniwob", "PIL"),
    "dmenv": ("grpc", "dm_env_rpc"),
    "images": ("cv2",),
    "mcp": ("mcp",),
    "minari": ("minari",),
    "multiagent": ("pettingzoo",),
    "ray": ("ray",),
}

def _missing_module(extra: str) -> str | None:
    for module in EXTRAS[extra]:
        if importlib.util.find_spec(module) is None:
            return module
    return None


def extra_reason(extra: str) -> str:
    return f"the {extra} extra is not installed: pip install -e '.[{extra}]'"


def need_extra(extra: str) -> None:
    """Skip the calling test (or module, at module level) unless ``extra`` is installed."""
    if _missing_module(extra) is not None:
        pytest.skip(extra_reason(extra), allow_module_level=True)


def needs_extra(extra: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(_missing_module(extra) is not None, reason=extra_reason(extra))


def program_reason(*commands: str) -> str:
    missing = [c for c in commands if shutil.which(c) is None]
    return f"{', '.join(missing)} not on PATH: scripts/install-system-packages installs it"


def needs_program(*commands: str) -> pytest.MarkDecorator:
    """Skip unless every command is on PATH (X programs, Xvnc, Chromium, podman)."""
    missing = any(shutil.which(c) is None for c in commands)
    return pytest.mark.skipif(missing, reason=program_reason(*commands) if missing else "")


def need_program(*commands: str) -> None:
    if any(shutil.which(c) is None for c in commands):
        pytest.skip(program_reason(*commands), allow_module_level=True)



#: What an env id of a family that needs an optional part looks like (atari, miniwob, x11).
_ENV_ID = re.compile(r"^(atari|miniwob|x11)\.[A-Za-z0-9_]+-v\d+$")


def env_missing(env_id: str) -> str | None:
    """Why ``env_id`` cannot be served here (its family's extra or program is missing), or
    None: the registry's own install hint."""
    if not _ENV_ID.match(env_id):
        return None
    from runtimes import registry

    return registry.missing_hint(env_id)


def need_env(*env_ids: str) -> None:
    """Skip the calling test (or fixture) unless this machine serves every ``env_id``."""
    for env_id in env_ids:
        if (why := env_missing(env_id)) is not None:
            pytest.skip(f"{env_id}: {why}")


def needs_env(*env_ids: str) -> pytest.MarkDecorator:
    why = next((f"{e}: {w}" for e in env_ids if (w := env_missing(e)) is not None), None)
    return pytest.mark.skipif(why is not None, reason=why or "")


def skip_missing_env_params(item: pytest.Item) -> None:
    """A parametrized test whose parameters name an env id this machine cannot serve skips
    with the install hint (tests/conftest.py calls it for every collected test)."""
    callspec = getattr(item, "callspec", None)
    for value in callspec.params.values() if callspec is not None else ():
        if isinstance(value, str) and (why := env_missing(value)) is not None:
            item.add_marker(pytest.mark.skip(reason=f"{value}: {why}"))
            return
