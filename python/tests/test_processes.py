"""Mutual exclusion across processes: fenced read-modify-write from several at once."""

import multiprocessing

import pytest

from conftest import require_server


def _increment(url, key, times, tokens):
    from fencelock import sync

    locker = sync.Locker.connect(url)
    storage = locker.storage()
    for _ in range(times):
        with locker.lock(key, ttl=10, wait=60) as guard:
            value = storage.read(key, guard.fence)
            storage.write(key, guard.fence, str(int(value or b"0") + 1).encode())
            tokens.put(guard.token)
    locker.shutdown()


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_processes_never_lose_an_increment(backend, key):
    url = require_server(backend)
    processes, times = 3, 10
    context = multiprocessing.get_context("spawn")
    tokens = context.Queue()
    workers = [
        context.Process(target=_increment, args=(url, key, times, tokens)) for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0, f"a worker exited with {worker.exitcode}"
    seen = [tokens.get(timeout=5) for _ in range(processes * times)]
    assert len(set(seen)) == processes * times, "a token was handed out twice"

    from fencelock import sync

    value, _ = sync.Storage.connect(url).peek(key)
    assert value == str(processes * times).encode()
