"""``remotes.vector.batch_infos`` gives exactly what gymnasium's ``VectorEnv._add_info``
gives for the same per-env infos (no sockets)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv

from remotes.vector import batch_infos
from remotes.vector_infos import SteadyRows, set_columns, steady_infos


def gymnasium_infos(infos: list[dict[str, Any]]) -> dict[str, Any]:
    env = VectorEnv()
    env.num_envs = len(infos)
    out: dict[str, Any] = {}
    for i, info in enumerate(infos):
        out = env._add_info(out, info, i)
    return out


def assert_same(ours: Any, theirs: Any) -> None:
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs)
        for key in theirs:
            assert_same(ours[key], theirs[key])
        return
    assert type(ours) is type(theirs)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    if ours.dtype == object:
        for a, b in zip(ours, theirs, strict=True):
            assert a is b or (isinstance(a, np.ndarray) and np.array_equal(a, b)) or a == b
    else:
        assert np.array_equal(ours, theirs, equal_nan=ours.dtype.kind == "f")


def test_batch_infos_matches_gymnasium() -> None:
    frame = np.arange(6, dtype=np.uint8).reshape(2, 3)
    infos = [
        {"episode_id": 3, "score": 1.5, "remote.stalled": False, "text": ["hi"], "frame": 10,
         "rewarder.clock_skew": (-0.1, 0.2), "env_state": "running"},
        {"episode_id": 7, "remote.error": "connection lost", "remote.connected": False,
         "flag": np.bool_(True), "count": np.int32(4)},
        {"final_obs": frame, "final_info": {"episode_id": 2, "misses": 5}, "episode_id": 8,
         "score": 2, "pixels": frame},
        {},
    ]
    assert_same(batch_infos(infos, 4), gymnasium_infos(infos))


def test_no_infos_batch_to_nothing() -> None:
    assert batch_infos([{}, {}], 2) == {}


def test_keys_every_env_has_batch_as_gymnasium_does() -> None:
    """The usual step: every env gives every key (batched in one go), values mixed in type
    as gymnasium's first-value rule casts them."""
    infos = [
        {"episode_id": 3, "score": 1, "remote.connected": True, "rtt": 0.25, "text": [], "big": 2},
        {"episode_id": 4, "score": 2.75, "remote.connected": False, "rtt": 1, "text": ["a"], "big": True},
        {"episode_id": 5, "score": -1, "remote.connected": True, "rtt": 0.5, "text": [], "big": 0},
    ]
    assert_same(batch_infos(infos, 3), gymnasium_infos(infos))


def _merged(heads: list[dict[str, Any]], columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    return [{**head, **{key: values[i] for key, values in columns.items()}} for i, head in enumerate(heads)]


def test_a_steady_steps_info_a_key_at_a_time_is_gymnasiums_of_the_merged_infos() -> None:
    """The batched lane's steady step batches the remotes' own infos, then sets its own
    keys over them (remotes.lockstep_fast): the same arrays, masks and key order as
    gymnasium gives for ``{**remote_info, own keys...}``; each env's own info is that dict."""
    skew = (-0.1, 0.2)
    cases = [
        # every remote the same keys, one of ours ("frame") among them: it keeps its place
        ([{"lives": 3, "frame": 7, "remote.frame": 7}, {"lives": 2, "frame": 9, "remote.frame": 9}],
         {"episode_id": [4, 5], "frame": [20, 21], "remote.connected": [True, True], "text": [[], []],
          "rewarder.rtt": [0.5, None], "rewarder.clock_skew": [skew, None], "instruction": [None, "go"]}),
        # remotes with different keys (a dict among them), a None rtt first
        ([{"score": 1.5, "nested": {"a": 1}}, {}, {"score": 2}],
         {"episode_id": [1, 2, 3], "frame": [4, 5, 6], "text": [[], ["hi"], []],
          "rewarder.rtt": [None, 0.25, 0.5], "instruction": ["x", None, None]}),
    ]
    for heads, columns in cases:
        n = len(heads)
        ours = batch_infos(heads, n)
        set_columns(ours, columns, n)
        merged = _merged(heads, columns)
        assert_same(ours, gymnasium_infos(merged))
        assert_same(steady_infos(heads, columns, n), ours)
        rows = SteadyRows(heads, columns)
        assert len(rows) == n and list(rows) == merged and rows[1:] == merged[1:]
        assert all(list(row) == list(want) for row, want in zip(rows, merged, strict=True))  # key order
        assert rows[0] is rows[0] and rows[0]["text"] is columns["text"][0]  # made once, not copied


def test_a_steady_steps_own_value_of_a_kind_batched_apart_still_matches() -> None:
    """A key of ours whose values are dicts or numpy scalars goes gymnasium's general way."""
    heads: list[dict[str, Any]] = [{}, {}]
    columns = {"stats": [{"a": 1}, {"a": 2}], "count": [np.int32(1), np.int32(2)]}
    ours = batch_infos(heads, 2)
    set_columns(ours, columns, 2)
    assert_same(ours, gymnasium_infos(_merged(heads, columns)))
    assert_same(steady_infos(heads, columns, 2), ours)


def test_a_steady_steps_info_built_in_blocks_is_the_key_at_a_time_one() -> None:
    """:func:`steady_infos` (keys of one kind batched together, the masks one array) gives
    what ``batch_infos`` and ``set_columns`` give: kinds mixed within a key cast by the
    first value's, every other kind of value the general way, key order kept; each key's
    array and mask its own (writing one changes no other)."""
    frame = np.arange(6, dtype=np.uint8).reshape(2, 3)
    cases: list[tuple[list[dict[str, Any]], dict[str, list[Any]]]] = [
        ([{"lives": 3, "frame": 7, "score": 1.5, "flag": True, "name": "a", "nested": {"x": 1},
           "pixels": frame, "count": np.int32(2), "maybe": None, "pair": (1, 2)},
          {"lives": 2.7, "frame": 9, "score": 2, "flag": False, "name": "b", "nested": {"x": 2},
           "pixels": frame, "count": np.int32(3), "maybe": 4, "pair": [3]}],
         {"episode_id": [4, 5], "frame": [20, 21], "remote.connected": [True, True],
          "text": [[], ["hi"]], "rewarder.rtt": [0.5, 0.25], "rewarder.clock_skew": [(-0.1, 0.2), None],
          "instruction": [None, "go"], "stats": [{"a": 1}, {"a": 2}]}),
        ([{"only": 1}, {"only": 2}, {"only": 3}],
         {"episode_id": [1, 2, 3], "rewarder.rtt": [None, 0.5, 1.0]}),
        ([{}, {}], {"episode_id": [1, 2]}),
        ([{"a": 1, "b": 2}, {"b": 3, "a": 4}], {"frame": [5, 6]}),  # same keys, another order
        ([{"a": 1}, {"b": 2}], {"frame": [5, 6]}),  # different keys: the general way
    ]
    for heads, columns in cases:
        n = len(heads)
        want = batch_infos(heads, n)
        set_columns(want, columns, n)
        got = steady_infos(heads, columns, n)
        assert_same(got, want)
        if all(head.keys() == heads[0].keys() for head in heads):
            assert_same(got, gymnasium_infos(_merged(heads, columns)))
        arrays = list(got.values())
        for array in arrays:
            before = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
            if isinstance(array, np.ndarray) and array.dtype == np.bool_:
                array[0] = not array[0]
                assert all(b is a or np.array_equal(a, b) for a, b in zip(arrays, before, strict=True)
                           if a is not array)
