"""The asyncio API against memory, Redis and PostgreSQL."""

import asyncio
import builtins
import gc
import math
import re
import time

import pytest

import fencelock


async def test_lock_and_release(locker, key):
    async with await locker.lock(key, ttl=5, wait=2) as guard:
        assert isinstance(guard, fencelock.Guard)
        assert guard.key == key
        assert guard.token >= 1
        assert guard.fence.token == guard.token
        assert re.fullmatch(r"[0-9a-f]{32}", guard.fence.owner)
        assert not guard.lost
    assert guard.lost, "a released guard reports its lease gone"
    assert await guard.release() is False, "a second release finds nothing held"
    again = await locker.try_lock(key)
    assert again is not None, "the lock is free after the async with"
    await again.release()


async def test_tokens_increase_grant_after_grant(locker, key):
    tokens = []
    for _ in range(4):
        guard = await locker.lock(key, ttl=5)
        tokens.append(guard.token)
        assert await guard.release() is True
    assert tokens == sorted(set(tokens)), f"tokens not strictly increasing: {tokens}"


async def test_a_second_lock_waits_then_times_out(locker, key):
    held = await locker.lock(key, ttl=10)
    started = time.monotonic()
    with pytest.raises(fencelock.TimeoutError) as caught:
        await locker.lock(key, ttl=10, wait=0.5)
    waited = time.monotonic() - started
    assert 0.4 <= waited < 5, f"waited {waited:.2f} s for a 0.5 s budget"
    assert isinstance(caught.value, builtins.TimeoutError)
    assert isinstance(caught.value, fencelock.FencelockError)
    assert caught.value.key == key and caught.value.retryable
    await held.release()


async def test_a_waiting_lock_gets_the_lock_at_the_release(locker, key):
    held = await locker.lock(key, ttl=10)
    waiter = asyncio.create_task(locker.lock(key, ttl=10, wait=10))
    await asyncio.sleep(0.2)
    assert not waiter.done()
    await held.release()
    second = await asyncio.wait_for(waiter, 5)
    assert second.token > held.token
    await second.release()


async def test_try_lock_is_none_while_held(locker, key):
    held = await locker.try_lock(key, ttl=10)
    assert held is not None
    assert await locker.try_lock(key, ttl=10) is None
    await held.release()
    after = await locker.try_lock(key, ttl=10)
    assert after is not None and after.token > held.token
    await after.release()


async def test_async_with_releases_on_an_exception(locker, key):
    with pytest.raises(RuntimeError, match="boom"):
        async with await locker.lock(key, ttl=10) as guard:
            raise RuntimeError("boom")
    assert guard.lost
    after = await locker.try_lock(key, ttl=10)
    assert after is not None, "the lock was released when the block raised"
    await after.release()


async def test_a_superseded_holders_write_is_stale(locker, key):
    storage = locker.storage()
    # A holder that pauses past its lease: no watchdog, a 1 s ttl.
    paused = await locker.lock(key, ttl=1, watchdog=False)
    await storage.write(key, paused.fence, b"from the first holder")
    successor = await locker.lock(key, ttl=10, wait=10)  # granted once the lease lapsed
    assert successor.token > paused.token
    await storage.write(key, successor.fence, b"from the successor")

    with pytest.raises(fencelock.StaleError) as caught:
        await storage.write(key, paused.fence, b"the paused holder wakes up")
    assert caught.value.presented == paused.fence
    assert caught.value.current == successor.fence
    assert caught.value.resource == key and not caught.value.retryable
    with pytest.raises(fencelock.StaleError):
        await storage.read(key, paused.fence)

    assert await storage.read(key, successor.fence) == b"from the successor"
    value, fence = await storage.peek(key)
    assert value == b"from the successor" and fence == successor.fence
    assert paused.lost
    with pytest.raises(fencelock.LockLostError):
        await paused.extend(5)
    await successor.release()


async def test_storage_connect_fences_the_same_data(url, key):
    locker = await fencelock.Locker.connect(url)
    storage = await fencelock.Storage.connect(url)
    first = await locker.lock(key, ttl=10)
    assert await storage.read(key, first.fence) is None
    await storage.write(key, first.fence, b"\x00binary\xff")
    await first.release()
    second = await locker.lock(key, ttl=10)
    assert await storage.read(key, second.fence) == b"\x00binary\xff"
    with pytest.raises(fencelock.StaleError):
        await storage.write(key, first.fence, b"late")
    await second.release()
    await locker.shutdown()


async def test_extend_renews_and_a_released_guard_cannot_extend(locker, key):
    guard = await locker.lock(key, ttl=5, watchdog=False)
    await guard.extend(10)
    assert not guard.lost
    await guard.release()
    with pytest.raises(fencelock.LockLostError) as caught:
        await guard.extend(10)
    assert caught.value.reason == "released"


async def test_wait_lost_completes_with_the_reason(locker, key):
    guard = await locker.lock(key, ttl=5)
    lost = asyncio.ensure_future(guard.wait_lost())
    await asyncio.sleep(0.05)
    assert not lost.done()
    await guard.release()
    assert await asyncio.wait_for(lost, 2) == "released"


BAD_SECONDS = [-1.0, -0.001, math.nan, math.inf, -math.inf, 1e300]


@pytest.mark.parametrize("value", BAD_SECONDS)
async def test_bad_ttl_and_wait_raise_value_errors_not_panics(locker, key, value):
    # `except Exception` catches them: a PanicException (a BaseException) would escape.
    for call in (
        lambda: locker.lock(key, ttl=value),
        lambda: locker.lock(key, wait=value),
        lambda: locker.try_lock(key, ttl=value),
    ):
        try:
            await call()
        except Exception as e:  # noqa: BLE001
            assert isinstance(e, fencelock.InvalidConfigError), repr(e)
            assert isinstance(e, ValueError)
            assert "ttl" in str(e) or "wait" in str(e), str(e)
        else:
            pytest.fail(f"{value} was taken")
    guard = await locker.lock(key, ttl=5)
    with pytest.raises(fencelock.InvalidConfigError, match="ttl"):
        await guard.extend(value)
    await guard.release()


async def test_a_ttl_below_the_backends_minimum_is_invalid_ttl(locker, key):
    with pytest.raises(fencelock.InvalidTtlError):
        await locker.lock(key, ttl=0.0001)
    with pytest.raises(fencelock.InvalidKeyError):
        await locker.lock("", ttl=5)


async def test_a_cancelled_wait_gives_its_place_back(locker, key):
    held = await locker.lock(key, ttl=30)
    # The first in line, cancelled while it waits; the second must not wait behind it.
    first = asyncio.create_task(locker.lock(key, ttl=30, wait=30))
    await asyncio.sleep(0.3)
    second = asyncio.create_task(locker.lock(key, ttl=30, wait=30))
    await asyncio.sleep(0.3)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.sleep(0.2)  # the place is given up in a task of the Rust runtime
    started = time.monotonic()
    await held.release()
    guard = await asyncio.wait_for(second, 5)
    took = time.monotonic() - started
    assert took < 2, f"the next waiter took {took:.2f} s after the release"
    # Tokens go up by one per grant on these backends: had the cancelled request lived on in
    # Rust, it would have been granted (and released) first.
    assert guard.token == held.token + 1, (held.token, guard.token)
    await guard.release()


async def test_a_dropped_guard_is_released_in_the_background(locker, key):
    guard = await locker.lock(key, ttl=30)
    token = guard.token
    del guard
    gc.collect()
    after = await locker.lock(key, ttl=5, wait=5)
    assert after.token > token
    await after.release()


async def test_an_unreachable_server_is_unavailable():
    with pytest.raises(fencelock.UnavailableError) as caught:
        await asyncio.wait_for(fencelock.Locker.connect("redis://127.0.0.1:1"), 30)
    assert isinstance(caught.value, ConnectionError)
    assert caught.value.retryable


async def test_a_bad_url_is_invalid_config():
    with pytest.raises(fencelock.InvalidConfigError):
        await fencelock.Locker.connect("nosuch://x")
    with pytest.raises(fencelock.InvalidConfigError, match="etcd"):
        await fencelock.Locker.connect("etcd://127.0.0.1:2379")


def test_fence_values():
    owner = "0123456789abcdef0123456789abcdef"
    fence = fencelock.Fence(7, owner)
    assert fence.token == 7 and fence.owner == owner
    assert fence == fencelock.Fence(7, owner) and hash(fence) == hash(fencelock.Fence(7, owner))
    assert "token=7" in repr(fence)
    with pytest.raises(fencelock.InvalidConfigError):
        fencelock.Fence(0, owner)
    with pytest.raises(fencelock.InvalidConfigError):
        fencelock.Fence(1, "not hex")
