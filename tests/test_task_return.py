"""What a task returns reaches its joiner as it is, on both runtimes: compiled, a coroutine's
return comes back from the engine's resume by value (``PyIter_Send``'s return status), not as
a StopIteration, so no value may be wrapped, unwrapped or taken for a trap on the way."""

from __future__ import annotations

import pytest

import tinycoro as tc

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_returned_values_reach_the_joiner_unchanged(contexts):
    values = [None, 0, (1, 2), (), StopIteration(5), StopIteration, GeneratorExit(), tc.lowlevel.YIELD]

    async def give(v):
        await tc.yield_now()
        return v

    async def main():
        got = [await tc.spawn(give(v)) for v in values]
        me = tc.lowlevel.current_task()

        async def own():
            return me

        got.append(await tc.spawn(own()))
        return got, me

    got, me = tc.run(main(), contexts=contexts)
    assert all(g is v for g, v in zip(got, values + [me]))
    assert len(got) == len(values) + 1
