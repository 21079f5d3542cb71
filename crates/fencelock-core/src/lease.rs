//! Leases: what a backend grants.

use std::time::Duration;

use tokio::time::Instant;

use crate::fence::{Fence, FencingToken, OwnerId};
use crate::key::LockKey;

/// A granted lock: who holds it, with which fencing token, and until when this process may
/// assume it still does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The lock's key.
    pub key: LockKey,
    /// The random owner drawn for this grant.
    pub owner: OwnerId,
    /// The grant's fencing token.
    pub token: FencingToken,
    /// The ttl the backend was asked for.
    pub ttl: Duration,
    /// A conservative local deadline: measured on the monotonic clock from the moment the
    /// request was *sent*, less the drift margin. Past it, the holder must assume the lock is gone.
    pub valid_until: Instant,
}

impl Lease {
    /// The fence to present to a [`FencedStorage`](crate::FencedStorage).
    pub fn fence(&self) -> Fence {
        Fence::new(self.token, self.owner)
    }

    /// Time left before `valid_until`, zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// Whether `valid_until` is still ahead.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }
}

/// The default drift margin for a ttl: `ttl / 100 + 2 ms`.
pub fn drift_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The conservative deadline of a lease whose request was sent at `sent_at`:
/// `sent_at + ttl - drift_margin(ttl)`, never before `sent_at`. A ttl too long for the clock
/// to represent gives a deadline about 30 years ahead, instead of overflowing.
pub fn valid_until(sent_at: Instant, ttl: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
    let validity = ttl.saturating_sub(drift_margin(ttl));
    sent_at
        .checked_add(validity)
        .or_else(|| sent_at.checked_add(FAR.min(validity)))
        .unwrap_or(sent_at)
}

/// What a backend reports about a key, for operators ([`LockBackend::inspect`](crate::LockBackend::inspect)).
///
/// A backend builds one with [`LockInfo::new`] (a free key that was never granted) and sets
/// what it knows; more fields may come, so it cannot be written as a struct literal.
///
/// ```
/// use fencelock_core::{LockInfo, LockKey, FencingToken};
/// let mut info = LockInfo::new(LockKey::new("orders/42")?);
/// info.last_token = FencingToken::new(7);
/// assert!(!info.is_held());
/// # Ok::<(), fencelock_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The key.
    pub key: LockKey,
    /// The current holder and its fence, if the lock is held.
    pub holder: Option<Fence>,
    /// The time left on the current holder's lease, as the backend sees it.
    pub remaining: Option<Duration>,
    /// The last token handed out for this key, if any ever was.
    pub last_token: Option<FencingToken>,
    /// The server's lock is held by someone who took it without fencelock (a plain
    /// `pg_advisory_lock` or `GET_LOCK` on the same lock id, which fencelock promises to
    /// exclude), described in the server's terms: `"PostgreSQL session pid 4242"`. Such a
    /// holder has no fence; `holder` is `None` then, and the lock is not free.
    pub unfenced_holder: Option<String>,
    /// When [`last_token`](Self::last_token) is `None` because the server lost its record of
    /// the key's tokens (PostgreSQL's counters are emptied by a crash, a promotion or a
    /// restore), the largest token that may have been granted for the key: its last grant is
    /// unknown, but no earlier grant is above this, and the next one will be. A fence lowered
    /// for the key must not go below it. `None` when the last token is known, or when nothing
    /// can have been granted.
    pub granted_at_most: Option<FencingToken>,
}

impl LockInfo {
    /// A free key that was never granted, as far as anyone knows: no holder, no last token.
    pub fn new(key: LockKey) -> Self {
        LockInfo {
            key,
            holder: None,
            remaining: None,
            last_token: None,
            unfenced_holder: None,
            granted_at_most: None,
        }
    }

    /// Whether anyone holds the lock, with a fence or without.
    pub fn is_held(&self) -> bool {
        self.holder.is_some() || self.unfenced_holder.is_some()
    }
}

/// What an entry of a key's queue stands for ([`QueueEntry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueueRole {
    /// The exclusive grant at the head of the queue.
    Holder,
    /// A plain try behind the head, which withdraws unless it finds itself first.
    Contender,
    /// A queued waiter's place: granted in its turn.
    Waiting,
    /// A reader of the read phase (the phase's fence is its token).
    Reader,
}

impl QueueRole {
    /// The role's name in reports (`holder`, `contender`, `waiting`, `reader`).
    pub fn as_str(self) -> &'static str {
        match self {
            QueueRole::Holder => "holder",
            QueueRole::Contender => "contender",
            QueueRole::Waiting => "waiting",
            QueueRole::Reader => "reader",
        }
    }
}

/// One entry of a key's queue, in the order the backend grants
/// ([`LockBackend::inspect_queue`](crate::LockBackend::inspect_queue)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// The entry's owner: the holder's or contender's lease owner, the waiter's id, or the
    /// reader's id.
    pub owner: OwnerId,
    /// What the entry stands for.
    pub role: QueueRole,
    /// The token the entry carries: a grant's, the read phase's, or the one a waiter will hold
    /// once granted where the backend draws it on entering (ZooKeeper); `None` for a waiter
    /// whose token is drawn at its grant (every other backend that lists a queue).
    pub token: Option<FencingToken>,
    /// The time left before the entry lapses as the server counts it (the ttl for a grant or
    /// a reader, the place ttl for a waiter); zero for one past its time.
    pub remaining: Duration,
}
