"""The per-episode reward buffer, sans I/O: feed events, assert what pop/peek return."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

from rewarder.protocol import Describe, Observation, Reward, Text
from rewarder.reward_buffer import (
    ARTIFICIAL_DONE,
    DISCONNECTED,
    EMPTY,
    MAX_REWARDS_PER_POP,
    EpisodeResult,
    RewardBuffer,
    merge_info,
)


def reward(
    episode: int, value: float = 1.0, done: bool = False, info: dict[str, Any] | None = None
) -> Reward:
    return Reward(episode, value, done, info or {}, 0.0)


def describe(episode: int, state: str = "running") -> Describe:
    return Describe(episode, "builtin.Catch-v0", state, 60.0, {}, 0.0)


def text(episode: int, words: str) -> Text:
    return Text(episode, words, 0.0)


def observation(episode: int, obs: Any) -> Observation:
    return Observation(episode, obs, 0.0)


def reset_buffer(episode: int = 1, **kwargs: Any) -> RewardBuffer:
    buffer = RewardBuffer(**kwargs)
    buffer.reset(episode)
    return buffer


# Masking before the first reset ----------------------------------------------------------


def test_pop_before_reset_is_empty_and_masked() -> None:
    buffer = RewardBuffer()
    buffer.file(describe(3))
    buffer.file(reward(3, 5.0))
    result = buffer.pop()
    assert result == EMPTY
    assert result.masked and result.episode_id is None
    assert buffer.masked
    assert buffer.peek() == EMPTY


def test_data_for_the_reset_episode_that_arrived_before_the_reply_is_kept() -> None:
    buffer = RewardBuffer()
    buffer.file(describe(3))
    buffer.file(describe(4, "resetting"))  # the server sends this before its reply
    buffer.reset(4)
    result = buffer.peek()
    assert result.episode_id == 4
    assert result.env_state == "resetting"
    assert buffer.stats.skipped_episodes == 1  # episode 3, superseded while masked


def test_masked_buffer_drops_data_older_than_what_it_holds() -> None:
    buffer = RewardBuffer()
    buffer.file(reward(5))
    assert not buffer.file(reward(4))
    assert buffer.stats.stale_messages == 1


def test_follow_adopts_the_first_episode_without_reset() -> None:
    buffer = RewardBuffer(follow=True)
    assert not buffer.masked
    buffer.file(describe(7))
    buffer.file(reward(7, 2.0))
    result = buffer.pop()
    assert (result.episode_id, result.reward, result.count) == (7, 2.0, 1)


# Aggregation -------------------------------------------------------------------------------


def test_pop_aggregates_and_consumes() -> None:
    buffer = reset_buffer(1)
    buffer.file(describe(1))
    buffer.file(reward(1, 1.0))
    buffer.file(reward(1, -0.5))
    buffer.file(text(1, "hello"))
    buffer.file(text(1, "world"))
    buffer.file(observation(1, [1, 2]))
    buffer.file(observation(1, [3, 4]))
    result = buffer.pop()
    assert result == EpisodeResult(1, 0.5, 2, False, {}, ("hello", "world"), [3, 4], "running")
    again = buffer.pop()
    # Increments are consumed; episode state (observation, env_state) stays.
    assert again == EpisodeResult(1, 0.0, 0, False, {}, (), [3, 4], "running")


def test_peek_does_not_consume_and_does_not_alias() -> None:
    buffer = reset_buffer(1)
    buffer.file(reward(1, 2.0, info={"stats.n": 1}))
    peeked = buffer.peek()
    peeked.info["mine"] = True
    assert buffer.peek() == EpisodeResult(1, 2.0, 1, False, {"stats.n": 1})
    assert buffer.pop() == EpisodeResult(1, 2.0, 1, False, {"stats.n": 1})


def test_popped_info_is_not_changed_by_later_messages() -> None:
    buffer = reset_buffer(1)
    buffer.file(reward(1, 1.0, info={"a": 1}))
    first = buffer.pop()
    buffer.file(reward(1, 1.0, info={"a": 2}))
    assert first.info == {"a": 1}
    assert buffer.pop().info == {"a": 2}


def test_done_is_sticky_within_the_episode() -> None:
    buffer = reset_buffer(1)
    buffer.file(reward(1, 1.0, done=True))
    buffer.file(reward(1, 1.0, done=False))
    result = buffer.pop()
    assert result.done and result.reward == 2.0 and result.count == 2


def test_describe_does_not_count_as_a_reward() -> None:
    buffer = reset_buffer(1)
    buffer.file(describe(1))
    assert buffer.pop().count == 0


# Info merging ------------------------------------------------------------------------------


def test_merge_info_sums_stats_overwrites_gauges_and_the_rest() -> None:
    into: dict[str, Any] = {}
    merge_info(into, {"stats.bytes": 10, "stats.gauges.lag": 0.5, "env": "a", "stats.s": "x"})
    merge_info(into, {"stats.bytes": 5, "stats.gauges.lag": 0.2, "env": "b", "stats.s": "y"})
    assert into == {"stats.bytes": 15, "stats.gauges.lag": 0.2, "env": "b", "stats.s": "y"}


def test_merge_info_flattens_nested_dicts_into_dotted_keys() -> None:
    into: dict[str, Any] = {}
    merge_info(into, {"stats": {"reward": {"count": 1}, "gauges": {"fps": 60}}, "a": {}})
    merge_info(into, {"stats.reward.count": 2, "stats": {"gauges": {"fps": 59}}})
    assert into == {"stats.reward.count": 3, "stats.gauges.fps": 59}


def test_merge_info_does_not_sum_booleans_or_replace_numbers_with_sums_of_strings() -> None:
    into: dict[str, Any] = {}
    merge_info(into, {"stats.flag": True})
    merge_info(into, {"stats.flag": True})
    assert into == {"stats.flag": True}
    merge_info(into, {"stats.n": "text"})
    merge_info(into, {"stats.n": 3})
    assert into["stats.n"] == 3


def test_info_is_merged_per_episode() -> None:
    buffer = reset_buffer(1)
    buffer.file(reward(1, 0.0, info={"stats.frames": 1, "score": 1}))
    buffer.file(reward(1, 0.0, info={"stats.frames": 1, "score": 2}))
    assert buffer.pop().info == {"stats.frames": 2, "score": 2}


# Episodes: reset, stale, artificial done, advancing ----------------------------------------


def test_reset_drops_older_episodes_and_their_late_data_is_stale() -> None:
    buffer = reset_buffer(1)
    buffer.file(reward(1, 5.0))
    buffer.reset(2)
    assert not buffer.file(reward(1, 5.0))
    assert buffer.stats.stale_messages == 1
    result = buffer.pop()
    assert (result.episode_id, result.reward, result.done) == (2, 0.0, False)


def test_newer_episode_marks_the_current_one_artificially_done() -> None:
    buffer = reset_buffer(1)
    buffer.file(reward(1, 1.0))
    buffer.file(describe(2, "resetting"))
    buffer.file(reward(2, 3.0))
    first = buffer.pop()
    assert first.episode_id == 1 and first.done and first.reward == 1.0
    assert first.info == {ARTIFICIAL_DONE: True}
    assert buffer.stats.artificial_dones == 1
    second = buffer.pop()
    assert (second.episode_id, second.reward, second.done) == (2, 3.0, False)
    assert second.env_state == "resetting"


def test_server_done_is_not_artificial() -> None:
    buffer = reset_buffer(1)
    buffer.file(reward(1, 1.0, done=True))
    buffer.file(describe(2))
    result = buffer.pop()
    assert result.done and ARTIFICIAL_DONE not in result.info
    assert buffer.stats.artificial_dones == 0


def test_pop_of_a_done_episode_advances_to_the_newest_known() -> None:
    buffer = reset_buffer(1)
    buffer.file(reward(1, 1.0, done=True))
    buffer.file(reward(2, 10.0, done=True))
    buffer.file(reward(3, 100.0))
    assert buffer.pop().episode_id == 1
    assert buffer.episode_id == 3
    result = buffer.pop()
    assert (result.episode_id, result.reward) == (3, 100.0)
    assert buffer.stats.skipped_episodes == 1  # episode 2 was never current
    assert not buffer.file(reward(2, 1.0))


def test_after_a_done_episode_the_next_one_is_adopted_as_it_arrives() -> None:
    buffer = reset_buffer(1)
    buffer.file(reward(1, 1.0, done=True))
    assert buffer.pop().done
    assert buffer.episode_id is None and not buffer.masked
    assert buffer.pop() == EMPTY
    assert not buffer.file(reward(1, 1.0))  # late data of the finished episode
    buffer.file(describe(2))
    buffer.file(reward(2, 4.0))
    result = buffer.pop()
    assert (result.episode_id, result.reward, result.done) == (2, 4.0, False)


def test_repeated_reset_to_the_current_episode_keeps_its_data() -> None:
    buffer = reset_buffer(1)
    buffer.file(reward(1, 1.0))
    buffer.reset(1)
    assert buffer.pop().reward == 1.0


def test_reset_to_a_lower_id_is_authoritative() -> None:
    buffer = reset_buffer(10)
    buffer.reset(2)  # e.g. a restarted server that counts from 1 again
    assert buffer.file(reward(2, 1.0))
    assert buffer.pop().episode_id == 2
    assert buffer.newest_episode_id == 10


def test_pops_that_gather_many_rewards_are_counted() -> None:
    buffer = reset_buffer(1)
    for _ in range(MAX_REWARDS_PER_POP + 1):
        buffer.file(reward(1, 1.0))
    buffer.pop()
    assert buffer.stats.backlogged_pops == 1


# Disconnects -------------------------------------------------------------------------------


def test_disconnect_ends_the_episode_then_masks_until_reset() -> None:
    buffer = reset_buffer(5)
    buffer.file(reward(5, 2.0))
    buffer.disconnected()
    result = buffer.pop()
    assert (result.episode_id, result.reward, result.done) == (5, 2.0, True)
    assert result.info == {ARTIFICIAL_DONE: True, DISCONNECTED: True}
    assert buffer.masked and buffer.pop() == EMPTY
    # A restarted server may count from 1 again: nothing is stale after a disconnect.
    buffer.file(describe(1))
    buffer.reset(buffer.newest_episode_id + 1)  # type: ignore[operator]
    assert buffer.pop().episode_id == 6


def test_disconnect_keeps_a_real_done() -> None:
    buffer = reset_buffer(5)
    buffer.file(reward(5, 1.0, done=True))
    buffer.disconnected()
    assert buffer.peek().info == {}
    assert buffer.pop().done


def test_follow_buffer_adopts_again_after_disconnect() -> None:
    buffer = RewardBuffer(follow=True)
    buffer.file(reward(3))
    buffer.disconnected()
    assert buffer.pop().done
    buffer.file(reward(1, 7.0))
    result = buffer.pop()
    assert (result.episode_id, result.reward) == (1, 7.0)


def test_disconnect_while_masked_does_nothing() -> None:
    buffer = RewardBuffer()
    buffer.disconnected()
    assert buffer.pop() == EMPTY


# Properties --------------------------------------------------------------------------------

# A server's stream: episode ids never go down, each episode may end with done.
streams = st.lists(
    st.tuples(
        st.integers(0, 2),  # how many episodes to move on before this message
        st.floats(-10, 10, allow_nan=False),
        st.booleans(),  # done
        st.booleans(),  # pop after this message
    ),
    max_size=60,
)


@given(streams, st.booleans())
def test_popped_episode_ids_never_go_down_and_reward_is_never_invented(
    stream: list[tuple[int, float, bool, bool]], follow: bool
) -> None:
    buffer = RewardBuffer(follow=follow)
    if not follow:
        buffer.reset(0)
    sent_abs: dict[int, float] = {}
    popped: dict[int, float] = {}
    last_popped = -1
    episode = 0

    def pop() -> None:
        nonlocal last_popped
        result = buffer.pop()
        if result.episode_id is not None:
            assert result.episode_id >= last_popped
            last_popped = result.episode_id
            popped[result.episode_id] = popped.get(result.episode_id, 0.0) + result.reward

    for step, value, done, pop_now in stream:
        episode += step
        buffer.file(reward(episode, value, done))
        sent_abs[episode] = sent_abs.get(episode, 0.0) + abs(value)
        if pop_now:
            pop()
    pop()
    for episode_id, total in popped.items():
        # Everything popped for an episode was sent for it (stale data may be missing).
        assert abs(total) <= sent_abs.get(episode_id, 0.0) + 1e-6
    assert buffer.stats.filed + buffer.stats.stale_messages == len(stream)


@given(streams)
def test_an_episode_reset_to_gets_every_reward_sent_for_it(
    stream: list[tuple[int, float, bool, bool]],
) -> None:
    buffer = RewardBuffer()
    buffer.reset(0)
    episode = 0
    expected = got = 0.0
    for step, value, _done, pop_now in stream:
        if step:
            got += buffer.pop().reward
            assert got == pytest.approx(expected)
            episode += step
            buffer.reset(episode)
            expected = got = 0.0
        buffer.file(reward(episode, value))
        expected += value
        if pop_now:
            got += buffer.pop().reward
    got += buffer.pop().reward
    assert got == pytest.approx(expected)


# quiet(): a cheap look before popping every step --------------------------------------------


def test_quiet_says_whether_a_pop_would_report_or_change_anything() -> None:
    buffer = reset_buffer(1)
    assert buffer.quiet()
    buffer.file(describe(1))  # a describe changes no aggregate
    assert buffer.quiet()
    for event in (reward(1, 0.0), text(1, "go left"), reward(1, 1.0, info={"k": 1})):
        buffer.file(event)
        assert not buffer.quiet()
        popped = buffer.pop()
        assert popped.count or popped.text
        assert buffer.quiet()
    buffer.file(reward(1, 1.0, done=True))
    assert not buffer.quiet()
    buffer.pop()
    buffer.reset(2)
    assert buffer.quiet()
    buffer.disconnected()  # the running episode ends, artificially: a pop reports it
    assert not buffer.quiet()
    assert buffer.pop().done
