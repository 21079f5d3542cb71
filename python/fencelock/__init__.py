"""fencelock: distributed locks whose every grant carries a strictly increasing fencing token,
and the storage side that refuses superseded holders.

The asyncio API is here (``await Locker.connect(url)``); the blocking one is
``fencelock.sync``. Both run the Rust crates of fencelock underneath.
"""

from ._errors import (
    AlreadyHeldError,
    BackendError,
    ConflictError,
    FencelockError,
    InvalidConfigError,
    InvalidKeyError,
    InvalidTtlError,
    LockLostError,
    QuorumError,
    StaleError,
    TimeoutError,
    UnavailableError,
    UnsupportedError,
    ValueTooLargeError,
)
from ._fencelock import DEFAULT_WAIT, Fence, Guard, Locker, Storage

__all__ = [
    "DEFAULT_WAIT",
    "Fence",
    "Guard",
    "Locker",
    "Storage",
    "AlreadyHeldError",
    "BackendError",
    "ConflictError",
    "FencelockError",
    "InvalidConfigError",
    "InvalidKeyError",
    "InvalidTtlError",
    "LockLostError",
    "QuorumError",
    "StaleError",
    "TimeoutError",
    "UnavailableError",
    "UnsupportedError",
    "ValueTooLargeError",
]
