"""Servers and lockers for the tests: memory, Redis and PostgreSQL, each a real server.

A server that is not running fails the tests that need it, with what to start.
"""

import os
import socket
import uuid

import pytest

REDIS = ("127.0.0.1", int(os.environ.get("FENCELOCK_TEST_REDIS_PORT", "6379")))
POSTGRES = ("127.0.0.1", int(os.environ.get("FENCELOCK_TEST_POSTGRES_PORT", "5432")))

# The tests' own key prefix and schema: nothing else on those servers is touched.
REDIS_PREFIX = "fencelock-pytest:"
POSTGRES_SCHEMA = "fencelock_pytest"

BACKENDS = {
    "memory": ("memory://", None, None),
    "redis": (
        f"redis://{REDIS[0]}:{REDIS[1]}/?prefix={REDIS_PREFIX}",
        REDIS,
        f"start Redis on {REDIS[0]}:{REDIS[1]} (`redis-server --port {REDIS[1]} --daemonize yes`)",
    ),
    "postgres": (
        f"postgres://postgres@{POSTGRES[0]}:{POSTGRES[1]}/test?schema={POSTGRES_SCHEMA}",
        POSTGRES,
        f"start PostgreSQL on {POSTGRES[0]}:{POSTGRES[1]} with a database `test` that user `postgres` "
        "reaches without a password (trust auth)",
    ),
}


def require_server(name):
    """The backend's URL; fails the test, saying what to start, when its server is down."""
    url, address, what_to_start = BACKENDS[name]
    if address is not None:
        try:
            socket.create_connection(address, timeout=2).close()
        except OSError as e:
            pytest.fail(f"{name} is not reachable at {address[0]}:{address[1]} ({e}): {what_to_start}")
    return url


@pytest.fixture(params=list(BACKENDS))
def url(request):
    """Each backend in turn."""
    return require_server(request.param)


@pytest.fixture
async def locker(url):
    import fencelock

    locker = await fencelock.Locker.connect(url)
    yield locker
    await locker.shutdown()


@pytest.fixture
def key():
    """A key of the test's own: runs never share a lock or a fence record."""
    return f"test/{uuid.uuid4().hex}"


def _redis_command(sock, *args):
    """Sends one RESP command and reads its reply (just what the clean-up below needs)."""
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    sock.sendall(b"".join(parts))
    reader = sock.makefile("rb")

    def read():
        line = reader.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind == b"*":
            return [read() for _ in range(int(rest))]
        if kind == b"$":
            if int(rest) < 0:
                return None
            data = reader.read(int(rest) + 2)[:-2]
            return data
        if kind == b"-":
            raise RuntimeError(rest.decode())
        return rest

    return read()


@pytest.fixture(scope="session", autouse=True)
def remove_test_keys_from_redis():
    """Deletes the keys of this run's prefix from Redis at the end (fence records last forever)."""
    yield
    try:
        sock = socket.create_connection(REDIS, timeout=5)
    except OSError:
        return
    with sock:
        cursor = b"0"
        while True:
            cursor, keys = _redis_command(sock, "SCAN", cursor, "MATCH", f"{REDIS_PREFIX}*", "COUNT", 1000)
            if keys:
                _redis_command(sock, "UNLINK", *keys)
            if cursor == b"0":
                break
