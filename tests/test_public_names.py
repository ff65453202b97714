"""Each package's public face: every name in ``__all__`` resolves to the object its module
holds, lazily (importing the package loads none of its modules' heavy parts), and a name
that is not public is an AttributeError naming it."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PACKAGES = ("rewarder", "runtimes", "vncdriver", "recordings", "remotes")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__, f"{package} names no public names"
    for name in module.__all__:
        assert getattr(module, name) is not None, (package, name)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


def test_importing_a_package_loads_none_of_its_modules() -> None:
    """``import rewarder`` (what serve and the blocking client do first) loads no client,
    server or compliance module: the faces are lazy."""
    code = ("import sys, rewarder, runtimes, vncdriver; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('rewarder', 'runtimes', 'vncdriver') and '.' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
