"""The rules of ``server.common.fair_share``, one by one, on an event loop without a server. The
real-server floods are in ``tests/e2e/test_fair_shares.py``."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack

import grpc
import pytest

from petlab.server.common.fair_share import FairSlots, peer_key
from petlab.server.common.rpc_errors import CallRefused


async def take(slots: FairSlots, caller: str, stack: AsyncExitStack) -> None:
    await stack.enter_async_context(slots.held(caller))


def waiting(slots: FairSlots, caller: str, outcome: dict, release: asyncio.Event) -> asyncio.Task:
    """``caller`` asks in a task; ``outcome[caller]`` is "admitted" or the refusal's code."""

    async def ask() -> None:
        try:
            async with slots.held(caller):
                outcome[caller] = "admitted"
                await asyncio.wait_for(release.wait(), 10)
        except CallRefused as exc:
            outcome[caller] = exc.code

    return asyncio.get_running_loop().create_task(ask())


async def settle(slots: FairSlots, waiters: int) -> None:
    deadline = time.monotonic() + 5
    while len(slots._waiters) != waiters and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert len(slots._waiters) == waiters


async def wait_for(outcome: dict, caller: str) -> object:
    deadline = time.monotonic() + 5
    while caller not in outcome and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return outcome.get(caller)


async def finish(tasks: list[asyncio.Task]) -> None:
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)


def test_a_caller_holding_its_share_is_refused_at_once_and_a_newcomer_gets_the_next_slot():
    async def scenario() -> None:
        slots = FairSlots(3, "evaluations", waiting=1, wait_seconds=10)
        release, outcome = asyncio.Event(), {}
        async with AsyncExitStack() as hog:
            for _ in range(3):
                await take(slots, "hog", hog)
            started = time.monotonic()
            with pytest.raises(CallRefused) as refused:
                await take(slots, "hog", hog)
            assert time.monotonic() - started < 1  # nobody waits for a slot it cannot get
            assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert ("retry-after-s", "5") in refused.value.trailing
            task = waiting(slots, "device", outcome, release)
            await settle(slots, 1)
            with pytest.raises(CallRefused):  # over its share (ceil(3 / 2)) while the device waits
                await take(slots, "hog", hog)
        await asyncio.sleep(0.1)  # the hog's first release went to the device, not back to the hog
        assert outcome == {"device": "admitted"} and slots.holders() == {"device": 1}
        release.set()
        await finish([task])
        assert slots.holders() == {}

    asyncio.run(scenario())


def test_a_full_room_takes_a_newcomer_only_in_place_of_a_bigger_holders_waiter():
    async def scenario() -> None:
        slots = FairSlots(4, "evaluations", waiting=1, wait_seconds=10)
        release, outcome = asyncio.Event(), {}
        async with AsyncExitStack() as stack:
            for caller in ("hog", "hog", "hog", "small"):
                await take(slots, caller, stack)
            tasks = [waiting(slots, "small", outcome, release)]  # under its share (2): waits
            await settle(slots, 1)
            tasks.append(waiting(slots, "third", outcome, release))  # holds 0 < 1: displaces it
            await settle(slots, 1)
            assert await wait_for(outcome, "small") == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert outcome == {"small": grpc.StatusCode.RESOURCE_EXHAUSTED}
            with pytest.raises(CallRefused):  # holds 0 like the waiter: the room stays as it is
                await take(slots, "fourth", stack)
        assert await wait_for(outcome, "third") == "admitted"
        release.set()
        await finish(tasks)

    asyncio.run(scenario())


def test_a_refused_caller_keeps_its_turn_and_goes_before_later_askers():
    """A round robin, not a race: the device refused while another waited comes back after a
    newcomer took the room, and takes its place (the newcomer asked later)."""

    async def scenario() -> None:
        slots = FairSlots(1, "evaluations", waiting=1, wait_seconds=10)
        release = {name: asyncio.Event() for name in ("b", "e", "device")}
        outcome: dict = {}
        tasks = []
        async with AsyncExitStack() as a_holds:
            await take(slots, "a", a_holds)
            tasks.append(waiting(slots, "b", outcome, release["b"]))
            await settle(slots, 1)
            with pytest.raises(CallRefused):  # b asked first
                await take(slots, "device", AsyncExitStack())
        assert await wait_for(outcome, "b") == "admitted"  # a's slot went to b
        tasks.append(waiting(slots, "e", outcome, release["e"]))  # asks after the device did
        await settle(slots, 1)
        tasks.append(waiting(slots, "device", outcome, release["device"]))  # its retry
        assert await wait_for(outcome, "e") == grpc.StatusCode.RESOURCE_EXHAUSTED  # displaced
        release["b"].set()
        assert await wait_for(outcome, "device") == "admitted"
        release["device"].set()
        await finish(tasks)
        assert slots.holders() == {}

    asyncio.run(scenario())


def test_a_wait_is_bounded_and_ends_with_the_call():
    async def scenario() -> None:
        slots = FairSlots(1, "evaluations", waiting=1, wait_seconds=0.3)
        async with AsyncExitStack() as stack:
            await take(slots, "hog", stack)
            started = time.monotonic()
            with pytest.raises(CallRefused) as late:
                await take(slots, "device", AsyncExitStack())
            assert 0.25 < time.monotonic() - started < 2
            assert late.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            ended = asyncio.get_running_loop().create_task(take(slots, "device", AsyncExitStack()))
            await settle(slots, 1)
            ended.cancel()  # the call ended while waiting: its place is given up
            with pytest.raises(asyncio.CancelledError):
                await ended
            assert not slots._waiters
        assert slots.holders() == {}

    asyncio.run(scenario())


def test_a_batch_takes_one_turn_per_query():
    """A caller admitted for each query of a batch in turn: another caller asking meanwhile is
    served after the batch's current query, not after the whole batch."""

    async def scenario() -> None:
        slots = FairSlots(1, "evaluations", waiting=4, wait_seconds=10)
        order: list[str] = []

        async def batch() -> None:
            for _ in range(4):
                async with slots.held("batch"):
                    order.append("batch")
                    await asyncio.sleep(0.05)

        async def single() -> None:
            await asyncio.sleep(0.02)  # asks while the batch's first query runs
            async with slots.held("device"):
                order.append("device")

        await asyncio.wait_for(asyncio.gather(batch(), single()), 5)
        assert order.index("device") == 1, order

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        ("ipv4:203.0.113.7:5555", "ip:203.0.113.7"),
        ("ipv4:203.0.113.7:6666", "ip:203.0.113.7"),  # another connection, the same caller
        ("ipv6:[2001:db8:1:2:aaaa::1]:5555", "ip:2001:db8:1:2::/64"),
        ("ipv6:[2001:db8:1:2:bbbb::9]:7", "ip:2001:db8:1:2::/64"),
        ("ipv6:[::ffff:198.51.100.1]:80", "ip:198.51.100.1"),
        ("ipv4:127.0.0.1:5555", "ipv4:127.0.0.1:5555"),  # loopback: the connection
        ("ipv6:[::1]:5555", "ipv6:[::1]:5555"),
        ("unix:/run/petlab.sock", "unix:/run/petlab.sock"),
        ("ipv4:not-an-address:1", "ipv4:not-an-address:1"),
    ],
)
def test_anonymous_callers_are_their_address_or_on_loopback_their_connection(peer, key):
    assert peer_key(peer) == key
