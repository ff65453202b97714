"""Frames in place (rewarder/shm_bank.py): the agent's buffers, handed out only while nobody
holds them, and the remote's side, which maps an agent's buffer only when it is the very
sealed memfd the request names, reached through ``/proc`` of the socket's peer."""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from collections.abc import Iterator

import numpy as np
import pytest

from rewarder.batch_messages import MAX_BANK_ROWS, BatchStepRequest
from rewarder.parsers import parse_batch_step
from rewarder.protocol import Message
from rewarder.shm_bank import MAX_BUFFERS, Bank, BankBuffer, BankTarget, peer_pid

ROWS, HEIGHT, WIDTH = 4, 6, 5


@pytest.fixture
def buffer() -> Iterator[BankBuffer]:
    made = BankBuffer(ROWS, HEIGHT, WIDTH)
    yield made
    made.close()


def _target(buffer: BankBuffer, **changed: object) -> BankTarget:
    fields: dict[str, object] = {"pid": os.getpid(), "name": buffer.name, "fd": buffer.fd,
                                 "inode": buffer.inode, "rows": buffer.rows, "height": HEIGHT, "width": WIDTH}
    fields.update(changed)
    return BankTarget(**fields)  # type: ignore[arg-type]


def test_a_remote_writes_rows_the_agent_reads_in_place(buffer: BankBuffer) -> None:
    target = _target(buffer)
    frame = np.arange(HEIGHT * WIDTH * 3, dtype=np.uint8).reshape(HEIGHT, WIDTH, 3)
    target.write(2, frame, 17, 5)
    np.copyto(target.pixels(0), frame[::-1])
    target.write(0, None, 3, 5)
    batch = buffer.batch()
    assert batch.flags.c_contiguous and batch.shape == (ROWS, HEIGHT, WIDTH, 3)
    assert np.array_equal(batch[2], frame) and np.array_equal(batch[0], frame[::-1])
    assert buffer.holds((0, 2), (3, 17), (5, 5))
    assert not buffer.holds((0, 2), (3, 16), (5, 5))  # an older frame of row 2
    assert not buffer.holds((1,), (0,), (0,))  # never written
    out = np.zeros_like(batch)
    assert buffer.read_rows(out, [0, 1, 2]) == [(3, 5), None, (17, 5)]
    assert np.array_equal(out[2], frame) and not out[1].any()  # copied: another array
    target.close()


@pytest.mark.parametrize(("changed", "why"), [
    ({"inode": 1}, "not frame buffer"),
    ({"name": "universe-remote-frame-bank-0-other"}, "not frame segment universe-remote-frame-bank-0-other"),
    ({"name": "something-else"}, "is not a frame buffer's name"),
    ({"rows": ROWS + 1}, "bytes, not the"),
    ({"fd": 2**20}, "No such file"),
])
def test_a_remote_maps_only_the_buffer_the_request_names(buffer: BankBuffer, changed: dict[str, object],
                                                          why: str) -> None:
    with pytest.raises((OSError, ValueError), match=why):
        _target(buffer, **changed)


def test_a_remote_never_maps_a_memfd_that_can_shrink() -> None:
    name = "universe-remote-frame-bank-0-unsealed"
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, 4096)
        with pytest.raises(ValueError, match="not sealed"):
            BankTarget(os.getpid(), name, fd, os.fstat(fd).st_ino, 1, 2, 2)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW)  # (growing alone: still shrinks)
        with pytest.raises(ValueError, match="not sealed"):
            BankTarget(os.getpid(), name, fd, os.fstat(fd).st_ino, 1, 2, 2)
    finally:
        os.close(fd)


def test_a_buffer_is_handed_out_again_only_once_nobody_holds_it() -> None:
    bank = Bank()
    try:
        first = bank.take(ROWS, HEIGHT, WIDTH)
        assert first is not None and first.in_flight
        obs = first.batch()
        first.in_flight = False  # (its step answered)
        second = bank.take(ROWS, HEIGHT, WIDTH)
        assert second is not None and second is not first  # the caller holds the first
        second.in_flight = False
        view = obs[1]  # a view keeps it held, its base gone
        del obs
        assert bank.take(ROWS, HEIGHT, WIDTH) not in (None, first)
        del view
        bank.settle()
        assert bank.take(ROWS, HEIGHT, WIDTH) is first
        held = [first.batch()]
        while (more := bank.take(ROWS, HEIGHT, WIDTH)) is not None:
            held.append(more.batch())
        assert len(bank.buffers) == MAX_BUFFERS  # all held: the step makes a fresh array
        first.retired = True
        del held
        bank.settle()
        assert all(bank.take(ROWS, HEIGHT, WIDTH) is not first for _ in range(MAX_BUFFERS))
    finally:
        bank.close()


def test_a_new_screen_size_lets_go_of_the_old_sizes_buffers_nobody_holds() -> None:
    bank = Bank()
    try:
        old = [bank.take(ROWS, HEIGHT, WIDTH) for _ in range(2)]
        held = old[0].batch()  # type: ignore[union-attr]
        bank.settle()
        new = bank.take(ROWS, HEIGHT + 2, WIDTH)
        assert new is not None and bank.buffers == [old[0], new]  # the held one stays
        del held
        bank.settle()
        assert bank.take(ROWS, HEIGHT + 2, WIDTH) is not None and old[0] not in bank.buffers
    finally:
        bank.close()


def test_a_stopped_bank_hands_out_nothing_and_says_why_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rewarder.shm_bank")
    bank = Bank()
    bank.stop("the remote said no")
    bank.stop("again")
    assert bank.take(ROWS, HEIGHT, WIDTH) is None and bank.off == "the remote said no"
    assert [r.getMessage() for r in caplog.records].count(
        "frames copied out of each remote's segment, not written in place: the remote said no") == 1


def test_the_peer_is_the_kernels_word_on_a_unix_socket_only() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert peer_pid(ours) == os.getpid()
    tcp = socket.socket()
    with tcp:
        assert peer_pid(tcp) is None
    assert peer_pid(None) is None


def _parsed(into: object, steps: int = 2) -> BatchStepRequest:
    body = {"obs": "shm", "into": into,
            "steps": [{"game": g, "episode_id": "1", "action": [], "frames": 1} for g in range(steps)]}
    return parse_batch_step(1, 0.0, Message("v0.batch.step", {"message_id": 1}, body))


def test_a_requests_buffer_is_read_and_bad_ones_refused_saying_what_is_wrong() -> None:
    into = _parsed(["universe-remote-frame-bank-1-ab", 7, 99, 8, [4, 5]]).into
    assert into is not None and (into.name, into.fd, into.inode, into.rows, into.slots) == (
        "universe-remote-frame-bank-1-ab", 7, 99, 8, (4, 5))
    assert _parsed(None).into is None
    for bad, why in [
        (["n", 7, 99, 8], "must be \\[name, fd, inode, rows"),
        (["n", -1, 99, 8, [0, 1]], "must be \\[name, fd, inode, rows"),
        (["n", 7, 99, MAX_BANK_ROWS + 1, [0, 1]], "MAX_BANK_ROWS"),
        (["n", 7, 99, 8, [0]], "each of the 2 steps its own row"),
        (["n", 7, 99, 8, [3, 3]], "each of the 2 steps its own row"),
        (["n", 7, 99, 8, [0, 8]], "in 0..7"),
        (["n", 7, 99, 8, [0, True]], "its own row"),
    ]:
        with pytest.raises(ValueError, match=why):
            _parsed(bad)
