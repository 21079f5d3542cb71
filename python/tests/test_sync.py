"""The blocking API (fencelock.sync) from plain threads."""

import builtins
import math
import threading
import time

import pytest

import fencelock
from fencelock import sync


@pytest.fixture
def sync_locker(url):
    locker = sync.Locker.connect(url)
    yield locker
    locker.shutdown()


def test_with_lock_and_tokens_increase(sync_locker, key):
    tokens = []
    for _ in range(3):
        with sync_locker.lock(key, ttl=5) as guard:
            assert isinstance(guard, sync.Guard)
            assert not guard.lost
            tokens.append(guard.token)
        assert guard.lost
    assert tokens == sorted(set(tokens))


def test_threads_take_turns_and_waiting_releases_the_gil(sync_locker, key):
    order = []
    first_holds = threading.Event()

    def first():
        with sync_locker.lock(key, ttl=10) as guard:
            order.append(("first", guard.token))
            first_holds.set()
            time.sleep(0.5)

    def second():
        first_holds.wait(5)
        with sync_locker.lock(key, ttl=10, wait=10) as guard:
            order.append(("second", guard.token))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    # This thread keeps running Python while the second waits in Rust: the GIL is free.
    first_holds.wait(5)
    spins, deadline = 0, time.monotonic() + 0.3
    while time.monotonic() < deadline:
        spins += 1
    for thread in threads:
        thread.join(15)
    assert [who for who, _ in order] == ["first", "second"]
    assert order[1][1] > order[0][1]
    assert spins > 10_000, f"the main thread ran only {spins} loops while another waited"


def test_timeout_and_try_lock(sync_locker, key):
    held = sync_locker.lock(key, ttl=10)
    assert sync_locker.try_lock(key) is None
    result = {}

    def contend():
        try:
            sync_locker.lock(key, wait=0.3)
        except Exception as e:  # noqa: BLE001
            result["error"] = e

    thread = threading.Thread(target=contend)
    thread.start()
    thread.join(10)
    error = result["error"]
    assert isinstance(error, fencelock.TimeoutError) and isinstance(error, builtins.TimeoutError)
    assert sync.TimeoutError is fencelock.TimeoutError
    assert held.release() is True
    after = sync_locker.try_lock(key)
    assert after is not None and after.token > held.token
    after.release()


def test_a_superseded_holders_write_is_stale(sync_locker, url, key):
    storage = sync_locker.storage()
    paused = sync_locker.lock(key, ttl=1, watchdog=False)
    storage.write(key, paused.fence, b"first")
    successor = sync_locker.lock(key, ttl=10, wait=10)
    storage.write(key, successor.fence, b"second")
    with pytest.raises(sync.StaleError) as caught:
        storage.write(key, paused.fence, b"late")
    assert caught.value.presented == paused.fence
    assert caught.value.current == successor.fence
    assert storage.read(key, successor.fence) == b"second"
    assert paused.lost
    with pytest.raises(fencelock.LockLostError):
        paused.extend(5)
    successor.release()
    if url != "memory://":  # a second connection sees the same fence records
        other = sync.Storage.connect(url)
        with pytest.raises(fencelock.StaleError):
            other.read(key, paused.fence)


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, 1e300])
def test_bad_ttl_raises_a_value_error(sync_locker, key, value):
    with pytest.raises(fencelock.InvalidConfigError, match="ttl"):
        sync_locker.lock(key, ttl=value)
    with pytest.raises(ValueError, match="wait"):
        sync_locker.lock(key, wait=value)
    with sync_locker.lock(key, ttl=5) as guard:
        with pytest.raises(fencelock.InvalidConfigError, match="ttl"):
            guard.extend(value)


def test_a_dropped_guard_is_released(sync_locker, key):
    guard = sync_locker.lock(key, ttl=30)
    token = guard.token
    del guard
    after = sync_locker.try_lock(key)
    assert after is not None and after.token > token
    after.release()
