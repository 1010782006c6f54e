"""The rules of ``server.common.fair_share``, one by one, without a server (issue 29, item 3).
The real-server floods are in ``tests/e2e/test_fair_shares.py``."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack

import grpc
import pytest

from petlab.server.common.fair_share import FairSlots, peer_key


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class Context:
    """What admission uses of a servicer context."""

    def __init__(self, active: bool = True):
        self.active = active
        self.trailing: tuple = ()

    def is_active(self) -> bool:
        return self.active

    def set_trailing_metadata(self, metadata) -> None:
        self.trailing = tuple(metadata)

    def abort(self, code, message):
        raise Refused(code, message)


def take(slots: FairSlots, caller: str, stack: ExitStack) -> None:
    stack.enter_context(slots.held(caller, Context()))


def waiting(slots: FairSlots, caller: str, outcome: dict, release: threading.Event) -> threading.Thread:
    """``caller`` asks in a thread; ``outcome[caller]`` is "admitted" or the refusal's code."""

    def ask() -> None:
        try:
            with slots.held(caller, Context()):
                outcome[caller] = "admitted"
                release.wait(10)
        except Refused as exc:
            outcome[caller] = exc.code

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread


def settle(slots: FairSlots, waiters: int) -> None:
    deadline = time.monotonic() + 5
    while len(slots._waiters) != waiters and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(slots._waiters) == waiters


def test_a_caller_holding_its_share_is_refused_at_once_and_a_newcomer_gets_the_next_slot():
    slots = FairSlots(3, "evaluations", waiting=1, wait_seconds=10)
    release, outcome = threading.Event(), {}
    with ExitStack() as hog:
        for _ in range(3):
            take(slots, "hog", hog)
        context = Context()
        started = time.monotonic()
        with pytest.raises(Refused) as refused, slots.held("hog", context):
            pass
        assert time.monotonic() - started < 1  # nobody waits for a slot it cannot get
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert ("retry-after-s", "5") in context.trailing
        thread = waiting(slots, "device", outcome, release)
        settle(slots, 1)
        with pytest.raises(Refused):  # over its share (ceil(3 / 2)) while the device waits
            take(slots, "hog", hog)
    thread.join(0.5)  # the hog's first release went to the device, not back to the hog
    assert outcome == {"device": "admitted"} and slots.holders() == {"device": 1}
    release.set()
    thread.join(5)
    assert slots.holders() == {}


def test_a_full_room_takes_a_newcomer_only_in_place_of_a_bigger_holders_waiter():
    slots = FairSlots(4, "evaluations", waiting=1, wait_seconds=10)
    release, outcome = threading.Event(), {}
    with ExitStack() as stack:
        for caller in ("hog", "hog", "hog", "small"):
            take(slots, caller, stack)
        threads = [waiting(slots, "small", outcome, release)]  # under its share (2): waits
        settle(slots, 1)
        threads.append(waiting(slots, "third", outcome, release))  # holds 0 < 1: displaces it
        settle(slots, 1)
        deadline = time.monotonic() + 5
        while "small" not in outcome and time.monotonic() < deadline:
            time.sleep(0.01)
        assert outcome == {"small": grpc.StatusCode.RESOURCE_EXHAUSTED}
        with pytest.raises(Refused):  # holds 0 like the waiter: the room stays as it is
            take(slots, "fourth", stack)
    for thread in threads:
        thread.join(0.5)
    assert outcome["third"] == "admitted"
    release.set()
    for thread in threads:
        thread.join(5)


def wait_for(outcome: dict, caller: str) -> object:
    deadline = time.monotonic() + 5
    while caller not in outcome and time.monotonic() < deadline:
        time.sleep(0.01)
    return outcome.get(caller)


def test_a_refused_caller_keeps_its_turn_and_goes_before_later_askers():
    """A round robin, not a race: the device refused while another waited comes back after a
    newcomer took the room, and takes its place (the newcomer asked later)."""
    slots = FairSlots(1, "evaluations", waiting=1, wait_seconds=10)
    release = {name: threading.Event() for name in ("b", "e", "device")}
    outcome: dict = {}
    threads = []
    with ExitStack() as a_holds:
        take(slots, "a", a_holds)
        threads.append(waiting(slots, "b", outcome, release["b"]))
        settle(slots, 1)
        with pytest.raises(Refused):  # b asked first
            take(slots, "device", ExitStack())
    assert wait_for(outcome, "b") == "admitted"  # a's slot went to b
    threads.append(waiting(slots, "e", outcome, release["e"]))  # asks after the device did
    settle(slots, 1)
    threads.append(waiting(slots, "device", outcome, release["device"]))  # its retry
    assert wait_for(outcome, "e") == grpc.StatusCode.RESOURCE_EXHAUSTED  # displaced by the device
    release["b"].set()
    assert wait_for(outcome, "device") == "admitted"
    for event in release.values():
        event.set()
    for thread in threads:
        thread.join(5)
    assert slots.holders() == {}


def test_a_wait_is_bounded_and_ends_with_the_call():
    slots = FairSlots(1, "evaluations", waiting=1, wait_seconds=0.3)
    with ExitStack() as stack:
        take(slots, "hog", stack)
        started = time.monotonic()
        with pytest.raises(Refused) as late, slots.held("device", Context()):
            pass
        assert 0.25 < time.monotonic() - started < 2
        assert late.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(Refused) as gone, slots.held("device", Context(active=False)):
            pass
        assert gone.value.code == grpc.StatusCode.CANCELLED
        assert not slots._waiters
    assert slots.holders() == {}


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
