"""Password guessing is decided when a password is compared, on every port: handshakes opened
before a block began and answered after it get no extra guesses, and a blocked address is
told it is blocked, and for how long, even when its password is right.

Measured before: 48 VNC handshakes opened at once from one address and then answered had
47 wrong passwords compared and the right 48th let in while the address was blocked (48
guesses per block where docs/security.md promises 5); a blocked viewer was told "wrong
password" although its password was right.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import aiohttp
import pytest

from envserver.remote import Remote
from rewarder.client import RewarderClient, basic_auth
from rewarder.errors import ConnectionClosed
from rewarder.throttle import BLOCK_SECONDS, MAX_FAILURES
from tests.optional import needs_extra
from vncdriver.client import VNCClient
from vncdriver.errors import AuthenticationFailed, ServerRefused
from vncdriver.handshake import AUTH_FAILED_REASON, ClientHandshake
from vncdriver.server import MAX_HANDSHAKING

PASSWORD: Final = "s3cret"
WAIT: Final = 10.0
#: What a blocked address is told, on every port.
BLOCKED: Final = re.compile(r"blocked for (\d+) s")


def blocked_seconds(text: str) -> int:
    """The seconds a refusal says the block lasts (fails if it says no such thing)."""
    found = BLOCKED.search(text)
    assert found is not None, f"not told it is blocked, and for how long: {text!r}"
    return int(found.group(1))


@pytest.fixture
async def remote(request: pytest.FixtureRequest) -> AsyncIterator[Remote]:
    """A remote with a password and the default throttle; ``http``/``dm`` params add ports."""
    ports = getattr(request, "param", "")
    remote = Remote("builtin.Catch-v0", password=PASSWORD)
    await remote.start(
        "127.0.0.1", 0, 0, http_port=0 if "http" in ports else None,
        dm_env_rpc_port=0 if "dm" in ports else None,
    )
    try:
        yield remote
    finally:
        await remote.close()


class HeldHandshake:
    """A real RFB 3.8 client handshake over TCP, held with its answer to the password
    challenge unsent until :meth:`answer`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 handshake: ClientHandshake, response: bytes) -> None:
        self.reader, self.writer, self.handshake, self.response = reader, writer, handshake, response

    @classmethod
    async def open(cls, port: int, password: str) -> HeldHandshake:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        handshake = ClientHandshake(password=password)
        while True:
            data = await asyncio.wait_for(reader.read(4096), WAIT)
            assert data, "the server closed before its password challenge"
            handshake.receive_data(data)
            out = handshake.data_to_send()
            if len(out) == 16:  # the answer to the challenge (a version is 12, a choice 1)
                return cls(reader, writer, handshake, out)
            writer.write(out)

    async def answer(self) -> str | None:
        """Send the answer: None if the server let us in, else the reason it gave."""
        self.writer.write(self.response)
        try:
            while not self.handshake.complete:
                data = await asyncio.wait_for(self.reader.read(4096), WAIT)
                assert data, "the server closed without a SecurityResult"
                try:
                    self.handshake.receive_data(data)
                except (AuthenticationFailed, ServerRefused) as exc:
                    return exc.reason
                self.writer.write(self.handshake.data_to_send())  # ClientInit
            return None
        finally:
            self.writer.close()


async def test_handshakes_opened_before_a_vnc_block_get_no_more_guesses(remote: Remote) -> None:
    """48 handshakes from one address, all opened (challenged) first; 47 answered wrong at
    once, then the 48th with the right password: MAX_FAILURES comparisons, the rest told
    they are blocked, and the right one refused with the time left."""
    assert remote.vnc_port is not None
    held = await asyncio.gather(*(
        HeldHandshake.open(remote.vnc_port, "wrong" if i < MAX_HANDSHAKING - 1 else PASSWORD)
        for i in range(MAX_HANDSHAKING)
    ))
    assert remote.auth_throttle.blocked("127.0.0.1") == 0  # nothing answered yet
    reasons = await asyncio.gather(*(h.answer() for h in held[:-1]))
    wrong = [r for r in reasons if r == AUTH_FAILED_REASON]
    refused = [r for r in reasons if r != AUTH_FAILED_REASON]
    assert len(wrong) == MAX_FAILURES, reasons
    assert all(r is not None and 0 < blocked_seconds(r) <= BLOCK_SECONDS for r in refused)
    right = await held[-1].answer()
    assert right is not None, "the right password got in while the address was blocked"
    assert 0 < blocked_seconds(right) <= BLOCK_SECONDS and "right password too" in right
    assert remote.vnc is not None and not remote.vnc.connections
    assert remote.auth_throttle.comparisons == MAX_FAILURES  # the right one never compared


async def test_a_burst_of_wrong_rewarder_passwords_gets_max_failures_guesses(remote: Remote) -> None:
    """The same race on the rewarder port: 48 handshakes with a wrong password at once,
    then the right one."""
    address = f"127.0.0.1:{remote.rewarder.port}"

    async def attempt(password: str) -> str:
        client = RewarderClient(address, password=password, start_timeout=WAIT, calibration_pings=0)
        with pytest.raises(ConnectionClosed) as refused:
            await client.start()
        await client.close()
        return refused.value.reason

    reasons = await asyncio.gather(*(attempt("wrong") for _ in range(MAX_HANDSHAKING)))
    wrong = [r for r in reasons if "wrong password for this remote" in r]
    assert len(wrong) == MAX_FAILURES, reasons
    assert all(0 < blocked_seconds(r) <= BLOCK_SECONDS for r in reasons if r not in wrong)
    right = await attempt(PASSWORD)
    assert 0 < blocked_seconds(right) <= BLOCK_SECONDS
    assert remote.rewarder.active is None
    assert remote.auth_throttle.comparisons == MAX_FAILURES


# A blocked address with the right password, on each port ---------------------------------


async def vnc_attempt(remote: Remote, password: str) -> str | None:
    try:
        async with VNCClient(f"127.0.0.1::{remote.vnc_port}", password=password, start_timeout=WAIT):
            return None
    except (AuthenticationFailed, ServerRefused) as exc:
        return exc.reason


async def rewarder_attempt(remote: Remote, password: str) -> str | None:
    client = RewarderClient(f"127.0.0.1:{remote.rewarder.port}", password=password,
                            start_timeout=WAIT, calibration_pings=0)
    try:
        await client.start()
    except ConnectionClosed as exc:
        return exc.reason
    finally:
        await client.close()
    return None


async def viewer_attempt(remote: Remote, password: str) -> str | None:
    assert remote.viewer is not None
    url = f"http://127.0.0.1:{remote.viewer.port}/viewer/session"
    async with aiohttp.ClientSession() as http, http.get(url, params={"password": password}) as r:
        if r.status == 200:
            return None
        text = await r.text()
        if r.status == 429:  # a blocked address: Retry-After says the same seconds
            assert int(r.headers["Retry-After"]) == blocked_seconds(text)
        else:
            assert r.status == 401, (r.status, text)
        return text


async def dm_env_rpc_attempt(remote: Remote, password: str) -> str | None:
    import grpc
    from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb, dm_env_rpc_pb2_grpc as pb_grpc

    assert remote.dm_env_rpc is not None
    async with grpc.aio.insecure_channel(f"127.0.0.1:{remote.dm_env_rpc.port}") as channel:
        call = pb_grpc.EnvironmentStub(channel).Process(
            metadata=(("authorization", basic_auth(password)),)
        )
        try:
            await call.write(pb.EnvironmentRequest(create_world=pb.CreateWorldRequest()))
            response = await call.read()
        except grpc.aio.AioRpcError:
            # The server may refuse before our write lands (a loaded machine): the write
            # then fails, but the call still ends with the server's status.
            response = None
        code, details = await call.code(), await call.details() or ""
        if code is grpc.StatusCode.OK or response is not None and response != grpc.aio.EOF:
            call.cancel()
            return None
        if BLOCKED.search(details):
            assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
        else:
            assert code is grpc.StatusCode.UNAUTHENTICATED, (code, details)
        return details


Attempt = Callable[[Remote, str], Awaitable[str | None]]


@pytest.mark.parametrize(
    ("remote", "attempt"),
    [("", vnc_attempt), ("", rewarder_attempt), ("http", viewer_attempt),
     pytest.param("dm", dm_env_rpc_attempt, marks=needs_extra("dmenv"))],
    indirect=["remote"], ids=["vnc", "rewarder", "viewer", "dm_env_rpc"],
)
async def test_a_blocked_right_password_is_told_blocked_for_n_s(remote: Remote, attempt: Attempt) -> None:
    for _ in range(MAX_FAILURES):
        wrong = await attempt(remote, "wrong")
        assert wrong is not None and not BLOCKED.search(wrong), wrong
    told = await attempt(remote, PASSWORD)
    assert told is not None, "the right password got in while the address was blocked"
    assert 0 < blocked_seconds(told) <= BLOCK_SECONDS and "wrong password for" not in told
    assert remote.auth_throttle.comparisons == MAX_FAILURES
