"""Channel: rendezvous and buffered transfer, FIFO, close semantics, cancellation, deadlock."""

from __future__ import annotations

import pytest

import tinycoro as tc
from helpers.runtime import cancel_and_wait
from helpers.sync import Cancelled, run, spawn_here, until, wait_blocked


@pytest.mark.timeout(60)
@pytest.mark.parametrize("capacity", [0, 1, 1024])
@pytest.mark.parametrize("producers,consumers", [(1, 1), (4, 3), (16, 16)])
def test_every_item_is_received_exactly_once_then_close_ends_consumers(
    contexts, capacity, producers, consumers
):
    per_producer = 9_600 // producers

    async def main():
        ch = tc.Channel(capacity)

        async def produce(p):
            for i in range(per_producer):
                await ch.send((p, i))

        async def consume():
            got = []
            async for item in ch:
                got.append(item)
            return got

        cs = [tc.spawn(consume()) for _ in range(consumers)]
        await tc.when_all(*(produce(p) for p in range(producers)))
        ch.close()
        received = [await c for c in cs]
        return received, ch.statistics()

    received, stats = run(main(), contexts)
    flat = [item for got in received for item in got]
    expected = {(p, i) for p in range(producers) for i in range(per_producer)}
    assert len(flat) == len(expected)  # nothing duplicated ...
    assert set(flat) == expected  # ... nothing lost
    for got in received:  # each consumer sees each producer's items in send order
        for p in range(producers):
            mine = [i for q, i in got if q == p]
            assert mine == sorted(mine)
    assert stats == tc.channel.ChannelStatistics(capacity, 0, 0, 0, True)


@pytest.mark.parametrize("capacity", [0, 1, 7])
def test_single_producer_single_consumer_is_fifo(contexts, capacity):
    async def main():
        ch = tc.Channel(capacity)

        async def produce():
            for i in range(2000):
                await ch.send(i)
            ch.close()

        t = tc.spawn(produce())
        got = [x async for x in ch]
        await t
        return got

    assert run(main(), contexts) == list(range(2000))


def test_rendezvous_send_completes_only_when_a_receiver_takes_the_item(contexts):
    async def main():
        ch = tc.Channel()  # capacity 0
        s = tc.spawn(ch.send("x"))
        await wait_blocked(s)
        assert ch.statistics() == tc.channel.ChannelStatistics(0, 0, 1, 0, False)
        assert repr(ch) == "<Channel capacity=0 buffered=0 senders=1 receivers=0>"
        assert not s.done()
        assert await ch.recv() == "x"
        await s
        r = tc.spawn(ch.recv())  # receiver first: the send hands over directly
        await wait_blocked(r)
        await ch.send("y")
        assert await r == "y"

    run(main(), contexts)


def test_buffered_send_does_not_wait_until_full(contexts):
    async def main():
        ch = tc.Channel(2)
        await ch.send(1)
        await ch.send(2)
        s = tc.spawn(ch.send(3))
        await wait_blocked(s)
        assert ch.statistics().buffered == 2 and ch.statistics().senders == 1
        assert await ch.recv() == 1  # room again: the blocked sender's item moves in
        await s
        assert ch.statistics().buffered == 2
        assert [await ch.recv(), await ch.recv()] == [2, 3]

    run(main(), contexts)


@pytest.mark.parametrize("capacity", [0, 3])
def test_close_fails_blocked_senders_and_receivers_drain_the_buffer_first(contexts, capacity):
    async def main():
        ch = tc.Channel(capacity)
        for i in range(capacity):
            await ch.send(i)
        blocked = [tc.spawn(ch.send(f"late{i}")) for i in range(3)]
        await wait_blocked(*blocked)
        ch.close()
        ch.close()  # idempotent
        for b in blocked:
            with pytest.raises(tc.ChannelClosed):
                await b
        with pytest.raises(tc.ChannelClosed):
            await ch.send("after close")
        drained = [x async for x in ch]
        with pytest.raises(tc.ChannelClosed):
            await ch.recv()
        assert ch.is_closed()
        return drained

    assert run(main(), contexts) == list(range(capacity))


def test_close_wakes_every_blocked_receiver(contexts):
    async def main():
        ch = tc.Channel(4)

        async def receiver():
            try:
                await ch.recv()
            except tc.ChannelClosed:
                return "closed"

        rs = [tc.spawn(receiver()) for _ in range(50)]
        await until(lambda: ch.statistics().receivers == 50)
        ch.close()
        return [await r for r in rs]

    assert run(main(), contexts) == ["closed"] * 50


def test_cancelled_sender_and_receiver_leave_the_queue_without_transferring(contexts):
    async def main():
        ch = tc.Channel()
        s1 = tc.spawn(ch.send("s1"))
        await until(lambda: ch.statistics().senders == 1)
        s2 = tc.spawn(ch.send("s2"))
        await until(lambda: ch.statistics().senders == 2)
        await cancel_and_wait(s1)
        assert await ch.recv() == "s2"  # s1's item was never delivered
        await s2
        r1 = tc.spawn(ch.recv())
        await until(lambda: ch.statistics().receivers == 1)
        r2 = tc.spawn(ch.recv())
        await until(lambda: ch.statistics().receivers == 2)
        await cancel_and_wait(r1)
        await ch.send("to r2")
        assert await r2 == "to r2"
        return ch.statistics()

    assert run(main(), contexts) == tc.channel.ChannelStatistics(0, 0, 0, 0, False)


def test_item_handed_to_a_receiver_being_cancelled_is_not_lost(contexts):
    async def main():
        ch = tc.Channel()

        async def receiver():
            item = await ch.recv()  # gets the item even though cancel was requested first
            try:
                await tc.yield_now()
            except Cancelled:
                return ("cancelled after receiving", item)
            return ("not cancelled", item)

        r = spawn_here(receiver())  # same context: nothing runs between cancel and send
        await until(lambda: ch.statistics().receivers == 1)
        r.cancel()
        await ch.send("precious")
        return await r

    assert run(main(), contexts) == ("cancelled after receiving", "precious")


def test_channel_misuse():
    with pytest.raises(ValueError):
        tc.Channel(-1)
    with pytest.raises(TypeError):
        tc.Channel(1.0)


@pytest.mark.timeout(30)
def test_recv_that_nobody_sends_to_is_a_deadlock(contexts):
    async def main():
        ch = tc.Channel(8)

        async def starving():
            await ch.recv()

        await tc.spawn(starving())

    with pytest.raises(tc.DeadlockError) as ei:
        run(main(), contexts, deadlock_timeout=0.2)
    assert any(
        w == "<Channel capacity=8 buffered=0 senders=0 receivers=1>" for _t, w in ei.value.parked
    )
