//! The one error type of fencelock.

use std::time::Duration;

use crate::fence::Fence;

/// A boxed error from a driver or the operating system, kept as the `source` of an [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with fencelock's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a lease is no longer held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The backend no longer has the lock: it expired or was released.
    NotHeld,
    /// Another owner holds the lock now.
    Superseded,
    /// The backend session that carried the lease ended (for example a terminated connection).
    SessionEnded,
    /// The local deadline (`valid_until`) passed before a renewal could be confirmed.
    DeadlinePassed,
    /// The guard released the lease.
    Released,
}

impl LostReason {
    /// The reason as one snake-case word (`"deadline_passed"`, ...), for metrics labels.
    pub fn word(self) -> &'static str {
        match self {
            LostReason::NotHeld => "not_held",
            LostReason::Superseded => "superseded",
            LostReason::SessionEnded => "session_ended",
            LostReason::DeadlinePassed => "deadline_passed",
            LostReason::Released => "released",
        }
    }
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::NotHeld => "the lock expired or was released",
            LostReason::Superseded => "another owner holds the lock",
            LostReason::SessionEnded => "the backend session holding the lock ended",
            LostReason::DeadlinePassed => "the lease's local deadline passed before renewal",
            LostReason::Released => "the lease was released",
        })
    }
}

/// What one node of a multi-node backend answered, reported by [`Error::QuorumFailed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    /// The node's address.
    pub node: String,
    /// What it answered, in words (`granted`, `held by another owner`, `timed out after 50ms`, ...).
    pub outcome: String,
}

impl std::fmt::Display for NodeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.node, self.outcome)
    }
}

/// What a [`Error::Stale`] says after the resource: the two fences, and when their tokens
/// are equal, that the owners differ.
fn stale_text(presented: &Fence, current: &Fence) -> String {
    if presented.token == current.token {
        format!(
            "presented {presented}, but the storage admitted token {} from another owner \
             ({}): the owners differ, so the token was handed out twice (a lock counter \
             that went back, or a second lock service)",
            current.token, current.owner
        )
    } else {
        format!("presented {presented}, storage is at {current}")
    }
}

fn join_reports(nodes: &[NodeReport]) -> String {
    nodes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every failure fencelock reports. Callers match on meaning, never on driver types.
///
/// Input errors ([`InvalidKey`](Error::InvalidKey), [`InvalidTtl`](Error::InvalidTtl),
/// [`InvalidConfig`](Error::InvalidConfig), [`ValueTooLarge`](Error::ValueTooLarge)) are raised
/// before any backend is touched, so they change nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is empty, too long, or contains a NUL or control character.
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The offending key, lossily decoded and shortened for display.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The ttl is below the backend's minimum ([`Capabilities::min_ttl`](crate::Capabilities::min_ttl),
    /// at least [`MIN_TTL`](crate::MIN_TTL)) or above its maximum; the reason names the bound.
    #[error("invalid ttl {}: {reason}", crate::duration::shown(*.ttl))]
    InvalidTtl {
        /// The ttl that was asked for.
        ttl: Duration,
        /// What is wrong with it.
        reason: String,
    },
    /// A configuration value (URL, option, wait budget) is not usable.
    #[error("invalid configuration: {message}")]
    InvalidConfig {
        /// What is wrong.
        message: String,
        /// The underlying parse error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// A value is larger than the storage accepts.
    #[error("value of {size} bytes is larger than the maximum of {max} bytes")]
    ValueTooLarge {
        /// The value's size.
        size: usize,
        /// The storage's maximum.
        max: usize,
    },
    /// The [`Locker`](crate::Locker) asked for a lock it already holds (re-entry): refused at
    /// once, before the backend is touched, so the holder neither waits for itself nor gets a
    /// second grant with a new token. Not retryable while the first guard is held.
    #[error("lock {key:?} is already held by this locker; locks are not re-entrant")]
    AlreadyHeld {
        /// The key asked for again.
        key: String,
    },
    /// The lock was not obtained within the wait budget.
    #[error("lock {key:?} not obtained within {}", crate::duration::shown(*.waited))]
    Timeout {
        /// The key that was asked for.
        key: String,
        /// How long the request waited.
        waited: Duration,
    },
    /// The lease is no longer held by its owner.
    #[error("lease on {key:?} lost: {reason}")]
    LeaseLost {
        /// The key of the lease.
        key: String,
        /// Why it is lost.
        reason: LostReason,
    },
    /// A fenced operation presented a fence older than the one the storage last admitted.
    /// Nothing was changed. When both carry the same token the owners differ (the storage
    /// admitted that token from another grant: a counter that went back), and the message says
    /// so.
    #[error("stale fence on {resource:?}: {}", stale_text(.presented, .current))]
    Stale {
        /// The resource the operation was for.
        resource: String,
        /// The fence the operation carried.
        presented: Fence,
        /// The newest fence the storage has admitted.
        current: Fence,
    },
    /// A multi-node backend could not gather a quorum.
    #[error("quorum not reached: {granted} of {needed} needed ({})", join_reports(.nodes))]
    QuorumFailed {
        /// Nodes that granted.
        granted: usize,
        /// Nodes needed for a quorum.
        needed: usize,
        /// What each node answered.
        nodes: Vec<NodeReport>,
    },
    /// The backend could not be reached, or did not answer in time.
    #[error("{backend} unavailable: {message}")]
    Unavailable {
        /// The backend's name.
        backend: &'static str,
        /// What happened.
        message: String,
        /// The driver error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// The backend gave up an operation because it conflicted with a concurrent one (a
    /// serialization failure or a deadlock, SQLSTATE `40001` / `40P01`): nothing was applied,
    /// and the same call run again may succeed. Retryable.
    #[error("{backend} conflict: {message}")]
    Conflict {
        /// The backend's name.
        backend: &'static str,
        /// What happened.
        message: String,
        /// The driver error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// The backend does not offer this kind of lock or operation
    /// ([`Capabilities::kinds`](crate::Capabilities::kinds) says which it offers). Nothing was
    /// changed.
    #[error("{backend} does not support {what}")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// What was asked for (`shared (reader) locks`, ...).
        what: &'static str,
    },
    /// The backend answered with an error or with something the protocol does not allow.
    #[error("{backend} error: {message}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// What happened.
        message: String,
        /// The driver error, if any.
        #[source]
        source: Option<BoxError>,
    },
}

impl Error {
    /// Whether trying the same call again later may succeed: time-outs, an unreachable backend,
    /// a missed quorum, a conflict with a concurrent operation. Input errors, lost leases and
    /// stale fences are not retryable.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. }
                | Error::Unavailable { .. }
                | Error::QuorumFailed { .. }
                | Error::Conflict { .. }
        )
    }

    /// Whether the caller's input was refused before anything was touched: a key, a ttl, a
    /// configuration (URL, option), a value too large, or a kind of lock or operation the
    /// backend does not offer. Tools exit with a usage error for these (the command line's
    /// exit code 2) and with a failure for everything else.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            Error::InvalidKey { .. }
                | Error::InvalidTtl { .. }
                | Error::InvalidConfig { .. }
                | Error::ValueTooLarge { .. }
                | Error::Unsupported { .. }
        )
    }

    /// The variant's name in snake case (`"stale"`, `"unavailable"`, ...): a label for
    /// metrics and logs that stays the same whatever the message says.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidKey { .. } => "invalid_key",
            Error::InvalidTtl { .. } => "invalid_ttl",
            Error::InvalidConfig { .. } => "invalid_config",
            Error::ValueTooLarge { .. } => "value_too_large",
            Error::AlreadyHeld { .. } => "already_held",
            Error::Timeout { .. } => "timeout",
            Error::LeaseLost { .. } => "lease_lost",
            Error::Stale { .. } => "stale",
            Error::QuorumFailed { .. } => "quorum_failed",
            Error::Unavailable { .. } => "unavailable",
            Error::Conflict { .. } => "conflict",
            Error::Unsupported { .. } => "unsupported",
            Error::Backend { .. } => "backend",
        }
    }

    /// This error with `context` (the server, the operation) in front of its message, for
    /// the variants that carry one a user reads to act (`InvalidConfig`, `Unavailable`,
    /// `Backend`); any other error as it is.
    pub fn in_context(self, context: &str) -> Self {
        match self {
            Error::InvalidConfig { message, source } => Error::InvalidConfig {
                message: format!("{context}: {message}"),
                source,
            },
            Error::Unavailable {
                backend,
                message,
                source,
            } => Error::Unavailable {
                backend,
                message: format!("{context}: {message}"),
                source,
            },
            Error::Backend {
                backend,
                message,
                source,
            } => Error::Backend {
                backend,
                message: format!("{context}: {message}"),
                source,
            },
            other => other,
        }
    }

    /// A [`Error::LeaseLost`] for `key`.
    pub fn lease_lost(key: &crate::LockKey, reason: LostReason) -> Self {
        Error::LeaseLost {
            key: key.to_string(),
            reason,
        }
    }

    /// A [`Error::Unsupported`]: `backend` does not offer `what`.
    pub fn unsupported(backend: &'static str, what: &'static str) -> Self {
        Error::Unsupported { backend, what }
    }

    /// A [`Error::InvalidConfig`] without a source.
    pub fn config(message: impl Into<String>) -> Self {
        Error::InvalidConfig {
            message: message.into(),
            source: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::{FencingToken, OwnerId};

    fn fence(token: u64, owner: u128) -> Fence {
        Fence::new(FencingToken::new(token).unwrap(), OwnerId::from_u128(owner))
    }

    #[test]
    fn a_stale_fence_with_the_same_token_says_the_owners_differ() {
        let same = Error::Stale {
            resource: "r".into(),
            presented: fence(3, 1),
            current: fence(3, 2),
        }
        .to_string();
        assert!(same.contains("the owners differ"), "{same}");
        assert!(same.contains(&OwnerId::from_u128(1).to_string()), "{same}");
        assert!(same.contains(&OwnerId::from_u128(2).to_string()), "{same}");
        let older = Error::Stale {
            resource: "r".into(),
            presented: fence(2, 1),
            current: fence(3, 2),
        }
        .to_string();
        assert!(!older.contains("owners differ"), "{older}");
        assert!(older.contains("storage is at token 3"), "{older}");
    }

    #[test]
    fn durations_are_rounded() {
        for (duration, text) in [
            (Duration::from_nanos(2_027_819), "2.03 ms"),
            (Duration::from_millis(500), "500 ms"),
            (Duration::from_secs(10), "10 s"),
            (Duration::from_secs(90), "1 min 30 s"),
        ] {
            let error = Error::Timeout {
                key: "k".into(),
                waited: duration,
            };
            assert_eq!(
                error.to_string(),
                format!("lock \"k\" not obtained within {text}")
            );
        }
    }
}
