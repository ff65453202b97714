"""gymnasium's vector info built from the remotes' own infos, a key at a time.

Held apart from :mod:`remotes.vector` because every way a vector steps (the general
lockstep path, the batched lane's steady state, send/recv, real time) builds its info
here, and it is the part of a step's agent cost that grows with the remotes' info keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import is_, itemgetter
from typing import Any, Final, overload

import numpy as np

__all__ = ["SteadyRows", "batch_infos", "column", "set_columns", "steady_infos"]

#: Value types gymnasium batches into a typed array (others go in an object array).
_SCALARS: Final = (int, float, bool)
#: A read-only mask of n Trues per vector size n, copied for each key (:func:`_whole`).
_WHOLE: dict[int, np.ndarray] = {}
#: :func:`steady_infos`' keys in order, each with its mask name, its values' getter
#: (None: the lane's column) and whether the caller batched it, by the remotes' keys,
#: ours and those batched: a steady step meets the same few sets over and over.
_Layout = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_Order = tuple[tuple[str, str, Any, bool], ...]
_ORDERS: dict[_Layout, _Order] = {}
#: Sets of keys whose order is kept at most (then the cache starts over).
_MAX_ORDERS: Final = 256

def batch_infos(infos: Sequence[dict[str, Any]], n: int) -> dict[str, Any]:
    """gymnasium's vector info — for each key an array over the ``n`` envs and a ``_key``
    mask of those that have it, nested dicts batched alike, ``final_obs`` an object
    array — built a key at a time (``VectorEnv._add_info`` goes an env and a key at a
    time: a call per key and env, a large part of a step's info cost with many remotes;
    hand-measured, benchmarks/RESULTS.md).

    The array's type is the type of the first env's value, as ``_add_info`` picks it.
    """
    keys: Any
    same = bool(infos) and len(infos) == n
    if same:  # (most steps: every env's info has the same keys)
        keys = infos[0].keys()
        same = all(info.keys() == keys for info in infos)
    if not same:
        keys = {}
        for info in infos:
            keys.update(dict.fromkeys(info))
    out: dict[str, Any] = {}
    whole = _whole(n)
    for key in list(keys):
        values = [info[key] for info in infos] if same else [info[key] for info in infos if key in info]
        first = values[0]
        if same and key != "final_obs":
            column = _plain_column(values, n)
            if column is not None:
                out[key], out[f"_{key}"] = column, whole.copy()
                continue
        present = [i for i, info in enumerate(infos) if key in info]
        if key == "final_obs":
            array: Any = np.full(n, None, dtype=object)
            for i, value in zip(present, values, strict=True):
                array[i] = value
        elif isinstance(first, dict):
            nested = [info.get(key, {}) if isinstance(info.get(key), dict) else {} for info in infos]
            array = batch_infos(nested, n)
        elif type(first) in _SCALARS or isinstance(first, np.number):
            array = np.zeros(n, dtype=type(first))
            array[present] = values
        elif isinstance(first, np.ndarray):
            array = np.zeros((n, *first.shape), dtype=first.dtype)
            for i, value in zip(present, values, strict=True):
                array[i] = value
        else:
            array = np.full(n, None, dtype=object)
            for i, value in zip(present, values, strict=True):
                array[i] = value
        mask = np.zeros(n, dtype=np.bool_)
        mask[present] = True
        out[key], out[f"_{key}"] = array, mask
    return out


def _whole(n: int) -> np.ndarray:
    """A mask of ``n`` Trues to copy (``np.ones`` costs ten copies; never handed out itself)."""
    whole = _WHOLE.get(n)
    if whole is None:
        whole = _WHOLE[n] = np.ones(n, dtype=np.bool_)
        whole.flags.writeable = False
    return whole


def _plain_column(values: list[Any], n: int) -> np.ndarray | None:
    """``values`` (one per env, each env has the key) as :func:`batch_infos` batches them
    when they are plain — a typed array for Python scalars (of the first one's type), an
    object array for anything but a dict, an ndarray or a numpy scalar; None for those
    (the caller's general way)."""
    first = values[0]
    kind = type(first)
    if kind in _SCALARS:  # (most keys: a Python scalar each: one array made, one mask)
        return np.array(values, dtype=kind)
    if first is None and all(map(is_, values, repeat(None))):  # (instructions, mostly; by
        # identity: a later array's == would not give one bool)
        return np.empty(n, dtype=object)
    if kind is dict or kind is np.ndarray or isinstance(first, np.number):
        return None
    return np.fromiter(values, dtype=object, count=n)  # (a list, a tuple or a string each: texts)


def column(key: str, values: list[Any], n: int) -> Any:
    """``values`` (one per env) batched as :func:`batch_infos` batches a key every env has:
    :func:`_plain_column`, else its general way."""
    plain = _plain_column(values, n)
    return batch_infos([{key: value} for value in values], n)[key] if plain is None else plain


def set_columns(out: dict[str, Any], columns: dict[str, list[Any]], n: int) -> None:
    """Set keys that every env's info has (``columns``: each key's values, one per env)
    over the vector info ``out``, each batched as :func:`batch_infos` would batch it in
    infos holding those keys last (a key ``out`` has already keeps its place)."""
    whole = _whole(n)
    for key, values in columns.items():
        out[key], out[f"_{key}"] = column(key, values, n), whole.copy()


def steady_infos(heads: list[dict[str, Any]], columns: dict[str, list[Any]], n: int,
                 fixed: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """What ``batch_infos(heads, n)`` then ``set_columns(out, columns, n)`` give (the
    batched lane's steady step: the remotes' own infos, then the lane's keys over them),
    in one pass over the keys: each key batched once (a key of both, ours, in the
    remote's place), a typed array straight from a list of Python scalars, an object
    array of Nones as numpy makes it. Remotes whose infos have different keys, and
    values of other kinds (dicts, arrays, numpy scalars), go the general way. The keys'
    order (and each one's mask name) is worked out once per set of keys. ``fixed``: keys
    of ``columns`` the caller batched already (:func:`column`; fresh arrays, its own)."""
    keys = heads[0].keys()
    if any(map(keys.__ne__, map(dict.keys, heads))):
        general = batch_infos(heads, n)
        set_columns(general, columns, n)
        return general
    made = {} if fixed is None else fixed
    layout = (tuple(keys), tuple(columns), tuple(made))
    order = _ORDERS.get(layout)
    if order is None:
        order = _order(layout)
    whole = _whole(n)
    out: dict[str, Any] = {}
    for key, mask, getter, built in order:
        if built:
            out[key] = made[key]
        else:
            values = columns[key] if getter is None else list(map(getter, heads))
            kind = type(values[0])
            out[key] = np.array(values, dtype=kind) if kind in _SCALARS else column(key, values, n)
        out[mask] = whole.copy()
    return out


def _order(layout: _Layout) -> _Order:
    """The keys of :func:`steady_infos`' result in order, each with its mask name, where
    its values come from (None: the lane's columns; else the getter of each remote's) and
    whether the caller batched it, kept for ``layout`` (the remotes' keys, ours, those
    batched)."""
    keys, columns, fixed = layout
    order: dict[str, tuple[str, str, Any, bool]] = {}
    for key in (*keys, *columns):
        if key not in order:
            order[key] = (key, f"_{key}", None if key in columns else itemgetter(key), key in fixed)
    if len(_ORDERS) >= _MAX_ORDERS:
        _ORDERS.clear()
    found = _ORDERS[layout] = tuple(order.values())
    return found


class SteadyRows(Sequence[dict[str, Any]]):
    """Each env's own info of a step whose vector info was built a key at a time
    (:func:`set_columns`), made only when asked (a vector's step never asks; a
    wrapper, a final info may): ``heads[i]`` (the remote's info) with each of
    ``columns``' keys set to its i-th value, as ``{**head, key: value, ...}`` is."""

    __slots__ = ("_heads", "_columns", "_rows")

    def __init__(self, heads: list[dict[str, Any]], columns: dict[str, list[Any]]) -> None:
        self._heads, self._columns = heads, columns
        self._rows: list[dict[str, Any] | None] = [None] * len(heads)

    def __len__(self) -> int:
        return len(self._heads)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        rows = self._rows
        row = rows[index]
        if row is None:  # (made once: asked twice, the same dict, as a tuple of dicts gives)
            row = {**self._heads[index]}
            for key, values in self._columns.items():
                row[key] = values[index]
            rows[index] = row
        return row
