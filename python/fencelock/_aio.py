"""Glue for the asyncio API: every awaitable the Rust side returns is a coroutine."""

import atexit
import time

_settle_registered = False


async def awaiting(future):
    """Awaits ``future`` (an asyncio future that a task of the Rust runtime completes).

    A coroutine, so ``asyncio.create_task(locker.lock(...))`` works; cancelling the task
    cancels the future, and the Rust future under it is dropped.
    """
    global _settle_registered
    if not _settle_registered:
        _settle_registered = True
        atexit.register(_settle)
    return await future


def _settle():
    """At exit, lets the Rust runtime's threads finish handing their last results to Python.

    A runtime thread may still be inside its last call into Python (setting a future's
    result) when the program's last ``await`` returns; the interpreter must not start
    finalizing under it (pyo3-async-runtimes issue #40: a fatal ``PyGILState_Release`` error
    at exit). ``time.sleep`` lets go of the GIL while it waits.
    """
    time.sleep(0.05)
