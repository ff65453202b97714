"""The README's "Training" section and the ``images`` extra (issue 29, item 10): a lockstep
vector env under gymnasium's usual wrappers, the figure it reached and the command that
measured it; its Python block runs in tests/test_readme.py beside ``make run``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]


def section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert match is not None, f"README has no section '## {title}'"
    return match.group(1)


def test_the_images_extra_brings_opencv() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("opencv-python-headless") for d in extras["images"])


def test_the_training_section_shows_a_lockstep_vector_env_its_figure_and_the_command() -> None:
    text = section("Training")
    block = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert block is not None
    code = block.group(1)
    assert 'mode="lockstep"' in code and "make_vec(" in code and "num_envs=8" in code
    assert "gymnasium.wrappers.vector import" in code and "RecordEpisodeStatistics" in code
    assert "ResizeObservation" in code and "GrayscaleObservation" in code
    assert "pip install 'universe-remote[images]'" in text
    figure = re.search(r"([\d,]+) env steps/s", text)
    assert figure is not None and int(figure.group(1).replace(",", "")) > 0
    assert re.search(r"`python train\.py`", text)  # the command that measured it
