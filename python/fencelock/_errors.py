"""The exceptions of fencelock, one per kind of ``fencelock::Error`` in Rust.

Every exception carries ``kind`` (the Rust variant in snake case, e.g. ``"stale"``) and
``retryable`` (whether the same call may succeed later). Input errors are also ``ValueError``,
a lock not obtained in time is also the builtin ``TimeoutError``, an unreachable backend is
also ``ConnectionError``.
"""

import builtins

__all__ = [
    "FencelockError",
    "InvalidConfigError",
    "InvalidKeyError",
    "InvalidTtlError",
    "ValueTooLargeError",
    "UnsupportedError",
    "AlreadyHeldError",
    "TimeoutError",
    "LockLostError",
    "StaleError",
    "QuorumError",
    "UnavailableError",
    "ConflictError",
    "BackendError",
]


class FencelockError(Exception):
    """Base of every fencelock error."""

    kind: str = "backend"
    retryable: bool = False


class InvalidConfigError(FencelockError, ValueError):
    """A URL, option or argument (a negative ttl, a NaN wait) is not usable; nothing was touched."""


class InvalidKeyError(InvalidConfigError):
    """The key is empty, too long, or contains a NUL or control character."""


class InvalidTtlError(InvalidConfigError):
    """The ttl is outside the backend's bounds (the message names the bound)."""


class ValueTooLargeError(InvalidConfigError):
    """The value is larger than the storage accepts."""


class UnsupportedError(FencelockError):
    """The backend does not offer this kind of lock or operation."""


class AlreadyHeldError(FencelockError):
    """The same holder asked again for a lock it holds; locks are not re-entrant."""


class TimeoutError(FencelockError, builtins.TimeoutError):
    """The lock was not obtained within ``wait`` seconds (``.key``, ``.waited``)."""


class LockLostError(FencelockError):
    """The lease is no longer held (``.key``, ``.reason``: ``"released"``, ``"superseded"``, ...)."""


class StaleError(FencelockError):
    """The storage refused a fence older than the newest it admitted; nothing was changed.

    ``.presented`` is the fence the operation carried, ``.current`` the newest the storage
    admitted, ``.resource`` the key.
    """


class QuorumError(FencelockError):
    """A multi-node backend (Redlock) could not gather a quorum."""


class UnavailableError(FencelockError, ConnectionError):
    """The backend could not be reached or did not answer in time."""


class ConflictError(FencelockError):
    """The backend gave up the operation because of a concurrent one; retrying may succeed."""


class BackendError(FencelockError):
    """The backend answered with an error or something its protocol does not allow."""
