"""core/tokens: a token taken by exactly one of the threads that race for it, given back at
most once, and a free list's spares taken one each. These run the interpreted twin (the C one
is reached only through compiled callers: the Mutex's and a stream's tests run it on both
runtimes)."""

from __future__ import annotations

import threading

from tinycoro.core import tokens


def test_a_token_is_taken_once_and_given_back_once():
    token = tokens.new()
    assert tokens.take(token) is True
    assert tokens.take(token) is False
    tokens.give(token)
    tokens.give(token)  # a second give still leaves one token
    assert tokens.take(token) is True
    assert tokens.take(token) is False


def test_a_spare_is_taken_once_and_an_empty_list_gives_none():
    a, b = object(), object()
    spares = [a, b]
    assert tokens.spare(spares) is b
    assert tokens.spare(spares) is a
    assert tokens.spare(spares) is None
    assert spares == []


def test_of_threads_racing_for_a_token_exactly_one_takes_it_each_round():
    threads, rounds = 4, 300
    token = tokens.new()
    tokens.take(token)  # held while the threads line up
    barrier = threading.Barrier(threads + 1, timeout=60)
    won = [0] * threads

    def racer(i: int) -> None:
        for _ in range(rounds):
            barrier.wait()  # the round starts: the token is back
            won[i] += tokens.take(token)
            barrier.wait()  # the round is over

    ts = [threading.Thread(target=racer, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for _ in range(rounds):
        tokens.give(token)
        barrier.wait()
        barrier.wait()
        assert not tokens.take(token)  # taken by a racer, and only once
    for t in ts:
        t.join(timeout=60)
    assert sum(won) == rounds
