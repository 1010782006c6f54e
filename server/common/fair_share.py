"""Fair shares of a few slots between callers, on the event loop.

Fail-fast slots go to whoever asks most often: one anonymous caller sending ``Classify`` from six
threads would hold every evaluation slot while a device beside it is refused.

**Who is a caller** (:func:`caller_key`): the owner where callers are identified (bearer token,
client certificate); otherwise what a caller cannot multiply cheaply: a remote peer's IP address
(IPv4), or its /64 network (IPv6, where one subscriber commonly holds a whole /64). On loopback and
Unix sockets every process shares the address, so there the unit is the *connection* (the peer's
address and port): a local caller that opens many connections gets a share for each. That is the
documented limit of anonymous fairness; tokens or client certificates lift it.

:class:`FairSlots`, the admission of ``count`` slots between callers:

* a free slot is taken at once (nobody waits for an idle server);
* when none is free, a caller that already holds its share (``ceil(count / callers present)``)
  is refused at once; a caller under its share waits in a room of ``waiting`` places, one place
  per caller (``waiting`` = 0: no room, such callers are refused). A released slot goes to the
  waiting caller that ranks first, never back to the crowd: so a caller holding its share gets no
  new slot while another caller waits;
* the rank: fewest slots held, then the earliest *turn* (when the caller last got a slot, or first
  asked since; a refused caller keeps its turn): a round robin over callers. A caller that asked
  before others were served goes before them, whatever their number of requests;
* a full room takes a newcomer only in place of a waiter that ranks after it (that waiter is
  refused); otherwise the newcomer is refused and keeps its turn for its retry. So a newcomer is
  admitted within one round: after at most one slot for each caller that asked before it;
* a wait lasts at most ``wait_seconds`` (and ends with the caller's call, which cancels it);
  every refusal is RESOURCE_EXHAUSTED with the ``retry-after-s`` hint.

A waiting call is a suspended coroutine holding its request (bounded by the room's size and the
message size limit), never a thread. The k-NN service admits each query of a batch on its own, so a
batch of 64 queries takes 64 turns and callers with single queries are served between them. Every
method runs on the event loop's thread: no lock.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import math
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from petlab.server.common.rpc_errors import RETRY_AFTER_SECONDS, refuse_busy

IPV6_NETWORK_BITS = 64
REMEMBERED_CALLERS = 65536  # callers whose turn is remembered (about 100 bytes each)


def caller_key(context: Any, owner: str | None = None) -> str:
    """The unit fair shares count (module docstring): ``owner`` when callers are identified, else
    the verified client certificate, else the peer's address or, on loopback, its connection."""
    if owner:
        return owner
    identities = context.peer_identities()
    if identities:
        return "cert:" + identities[0].decode("utf-8", errors="replace")
    return peer_key(context.peer() or "")


def peer_key(peer: str) -> str:
    """``ipv4:203.0.113.7:5555`` -> ``ip:203.0.113.7``; ``ipv6:[2001:db8::1]:5555`` ->
    ``ip:2001:db8::/64``; a loopback or Unix peer (or one that does not parse) stays whole: the
    connection."""
    scheme, _, rest = peer.partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return peer
    host = rest.rsplit(":", 1)[0].strip("[]") if scheme == "ipv6" else rest.rsplit(":", 1)[0]
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return peer
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    if address.is_loopback:
        return peer
    if address.version == 6:
        return "ip:" + str(ipaddress.ip_network(f"{address}/{IPV6_NETWORK_BITS}", strict=False))
    return f"ip:{address}"


@dataclass(eq=False)
class _Waiter:
    caller: str
    order: int
    wake: asyncio.Future[bool] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class FairSlots:
    """``count`` slots shared fairly between callers (module docstring)."""

    def __init__(
        self,
        count: int,
        what: str,
        waiting: int = 32,
        wait_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if count < 1 or waiting < 0 or wait_seconds <= 0:
            raise ValueError("fair slots need at least one slot, no negative room and a positive wait")
        self.count, self.what, self.waiting, self.wait_seconds = count, what, waiting, wait_seconds
        self._clock = clock
        self._free = count
        self._held: Counter[str] = Counter()
        self._waiters: list[_Waiter] = []
        self._turns: OrderedDict[str, float] = OrderedDict()  # caller -> its turn (see _turn)
        self._order = itertools.count()

    def holders(self) -> dict[str, int]:
        """Slots held per caller now (for tests and logs)."""
        return dict(self._held)

    @asynccontextmanager
    async def held(self, caller: str) -> AsyncIterator[None]:
        await self._admit(caller)
        try:
            yield
        finally:
            self._release(caller)

    # ------------------------------------------------------------------ admission

    async def _admit(self, caller: str) -> None:
        if self._free:
            self._free -= 1
            self._served(caller)
            return
        waiter, refusal, displaced = self._enter_room(caller)
        if displaced is not None and not displaced.wake.done():
            displaced.wake.set_result(False)
        if waiter is None:
            refuse_busy(refusal)
        await self._wait(waiter)

    def _enter_room(self, caller: str) -> tuple[_Waiter | None, str, _Waiter | None]:
        """No slot free: (the caller's place, or None and why not; a displaced waiter)."""
        self._turn(caller)  # a refused caller keeps its turn for its retry
        present = {c for c, n in self._held.items() if n} | {w.caller for w in self._waiters} | {caller}
        share = math.ceil(self.count / len(present))
        retry = f"retry in {RETRY_AFTER_SECONDS} seconds"
        if self._held[caller] >= share:
            return None, f"you hold your fair share of {self.what} ({share}) while others wait; {retry}", None
        if any(w.caller == caller for w in self._waiters):
            return None, f"you already have a call waiting for {self.what}; {retry}", None
        displaced = None
        if not self.waiting:
            return None, f"the server is busy with other {self.what}; {retry}", None
        if len(self._waiters) >= self.waiting:
            worst = max(self._waiters, key=self._rank)
            if self._rank(worst) <= (self._held[caller], self._turn(caller), math.inf):
                return None, f"the server is busy with other {self.what}; {retry}", None
            self._waiters.remove(worst)
            displaced = worst
        waiter = _Waiter(caller, next(self._order))
        self._waiters.append(waiter)
        return waiter, "", displaced

    def _turn(self, caller: str) -> float:
        """When ``caller`` was last admitted, or first asked since (remembered for the last
        :data:`REMEMBERED_CALLERS` callers). Among waiters holding as many slots, the earliest
        turn goes first: a round over every caller that asked before this one."""
        turn = self._turns.get(caller)
        if turn is None:
            turn = self._turns[caller] = self._clock()
            if len(self._turns) > REMEMBERED_CALLERS:
                self._turns.popitem(last=False)
        return turn

    def _served(self, caller: str) -> None:
        """``caller`` takes a slot; its turn moves to now."""
        self._held[caller] += 1
        self._turns[caller] = self._clock()
        self._turns.move_to_end(caller)
        if len(self._turns) > REMEMBERED_CALLERS:
            self._turns.popitem(last=False)

    def _rank(self, waiter: _Waiter) -> tuple[int, float, float]:
        """Who goes first (smallest): fewest slots held, then the earliest turn, then arrival."""
        return self._held[waiter.caller], self._turn(waiter.caller), waiter.order

    async def _wait(self, waiter: _Waiter) -> None:
        try:
            granted = await asyncio.wait_for(asyncio.shield(waiter.wake), self.wait_seconds)
        except (TimeoutError, asyncio.CancelledError):
            if waiter.wake.done() and waiter.wake.result():  # granted as the wait ended: give it back
                self._release(waiter.caller)
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            if not waiter.wake.done():
                waiter.wake.set_result(False)
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # the call ended: it goes, refused by nobody
                raise
            granted = False
        if not granted:
            refuse_busy(
                f"the server is busy with other callers' {self.what}; retry in {RETRY_AFTER_SECONDS} seconds"
            )

    def _release(self, caller: str) -> None:
        self._held[caller] -= 1
        if not self._held[caller]:
            del self._held[caller]
        if not self._waiters:
            self._free += 1
            return
        chosen = min(self._waiters, key=self._rank)
        self._waiters.remove(chosen)
        self._served(chosen.caller)
        chosen.wake.set_result(True)
