"""The password throttle when an address is shared (issue 34): a right password from a
frequent user must not hand a guesser at the same address fresh tries; time forgives a
user's occasional typos and, later, the escalation (rewarder/throttle.py's docstring)."""

from __future__ import annotations

from typing import Final

from rewarder.throttle import ESCALATION_MEMORY, FAILURE_MEMORY, AuthThrottle

SHARED: Final = "10.0.0.1"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _guess(throttle: AuthThrottle, times: int, address: str = SHARED) -> None:
    for _ in range(times):
        assert throttle.admit(address) is None
        throttle.failed(address, "test")


def _login(throttle: AuthThrottle, address: str = SHARED) -> None:
    assert throttle.admit(address) is None
    throttle.succeeded(address)


def test_a_users_logins_between_blocks_do_not_keep_a_guesser_at_the_first_block() -> None:
    clock = Clock()
    throttle = AuthThrottle(max_failures=5, block_seconds=10, max_block_seconds=600, clock=clock)
    seen = []
    for _ in range(8):
        _guess(throttle, 5)
        seen.append(throttle.blocked(SHARED))
        clock.now += seen[-1]
        _login(throttle)  # the frequent user, right after each block
    assert seen == [10, 20, 40, 80, 160, 320, 600, 600]


def test_a_users_logins_do_not_reset_a_guessers_count() -> None:
    clock = Clock()
    throttle = AuthThrottle(max_failures=5, clock=clock)
    for _ in range(4):
        _guess(throttle, 1)
        _login(throttle)
    _guess(throttle, 1)
    assert throttle.blocked(SHARED) > 0, "logins between guesses let a 5th guess in unblocked"
    assert throttle.comparisons == 9


def test_time_forgives_typos_then_the_escalation() -> None:
    clock = Clock()
    throttle = AuthThrottle(max_failures=5, block_seconds=10, clock=clock)
    _guess(throttle, 4)
    clock.now += FAILURE_MEMORY
    _guess(throttle, 4)  # the first four are forgotten: a user's typos an hour apart
    assert throttle.blocked(SHARED) == 0
    _guess(throttle, 1)
    assert throttle.blocked(SHARED) == 10
    clock.now += 10
    _guess(throttle, 5)
    assert throttle.blocked(SHARED) == 20  # within the memory: escalated
    clock.now += 20 + ESCALATION_MEMORY
    _guess(throttle, 5)
    assert throttle.blocked(SHARED) == 10  # an hour after the last block: from the start


def test_a_login_from_a_clean_address_leaves_no_record() -> None:
    throttle = AuthThrottle(clock=Clock())
    _login(throttle, "10.0.0.2")
    assert throttle._records == {}
