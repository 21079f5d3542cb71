"""The blocking API: the same locks, fences and storage as ``fencelock``, each call waiting
on the calling thread with the GIL released. Each ``Locker`` runs a small runtime of its own.

    from fencelock.sync import Locker

    locker = Locker.connect("redis://127.0.0.1:6379")
    with locker.lock("nightly-report", ttl=30) as guard:
        locker.storage().write("report", guard.fence, b"done")
"""

from ._errors import *  # noqa: F401,F403  (the same exceptions as the asyncio API)
from ._errors import __all__ as _errors
from ._fencelock import Fence
from ._fencelock import SyncGuard as Guard
from ._fencelock import SyncLocker as Locker
from ._fencelock import SyncStorage as Storage

__all__ = ["Fence", "Guard", "Locker", "Storage", *_errors]
