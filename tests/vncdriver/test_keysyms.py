"""Key names: a character of any script is a keysym too (Latin-1's X name, else X11's
Unicode keysym, ``U+XXXX``), and every name :func:`keysyms.name` gives back is one
:func:`keysyms.canonical` takes (``U+65E5`` came back from a number and was then refused)."""

from __future__ import annotations

import pytest

from vncdriver import keysyms
from vncdriver.errors import UnknownKey


@pytest.mark.parametrize(("key", "name", "number"), [
    ("é", "eacute", 0xE9), ("U+00E9", "eacute", 0xE9), ("€", "U+20AC", 0x010020AC),
    ("日", "U+65E5", 0x010065E5), ("U65E5", "U+65E5", 0x010065E5), ("u+65e5", "U+65E5", 0x010065E5),
    ("😀", "U+1F600", 0x0101F600), ("a", "a", 0x61), ("A", "A", 0x41), ("enter", "Return", 0xFF0D),
])
def test_any_character_and_its_code_point_name_are_keys(key: str, name: str, number: int) -> None:
    assert keysyms.canonical(key) == name
    assert keysyms.keysym(key) == number
    assert keysyms.name(number) == name
    assert keysyms.canonical(keysyms.name(number)) == name


@pytest.mark.parametrize("key", ["U+0000", "U+0041x", "U+110000", "nosuchkey", "\x07"])
def test_what_is_no_key_is_refused_by_name(key: str) -> None:
    with pytest.raises(UnknownKey):
        keysyms.canonical(key)
