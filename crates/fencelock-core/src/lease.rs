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

/// A grant a server made to a queued waiter by itself (a hand-off,
/// [`LockBackend::wait_for_grant`](crate::LockBackend::wait_for_grant)), as a message told
/// the waiter rather than a reply to its own request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandedGrant {
    /// The grant's fencing token.
    pub token: FencingToken,
    /// The server's clock when it granted, in µs.
    pub granted_us: u64,
    /// The (hand-off) ttl it granted for.
    pub ttl: Duration,
}

impl HandedGrant {
    /// The conservative deadline of this grant in this process's clock.
    ///
    /// The waiter's last refused try was sent at `tried_sent_at` (this process's clock) and
    /// ran at `tried_us` by the server's clock, the clock of `granted_us`. The grant's start
    /// here is no earlier than `tried_sent_at` plus the server's time between the try and the
    /// grant, less the drift rate that [`drift_margin`] allows for (1 in 100): the try ran no
    /// earlier than it was sent. The result is [`valid_until`] of that start.
    ///
    /// `None` when the grant is older than the try (a try that ran after a grant to this
    /// waiter and was refused saw the grant already gone, or the message is stale), and when
    /// the deadline has passed: the waiter then tries again, which takes up a grant still
    /// held.
    pub fn valid_until(&self, tried_sent_at: Instant, tried_us: u64) -> Option<Instant> {
        const DRIFT_DIVISOR: u32 = 100;
        let between = Duration::from_micros(self.granted_us.checked_sub(tried_us)?);
        let granted_at = tried_sent_at.checked_add(between - between / DRIFT_DIVISOR)?;
        let deadline = valid_until(granted_at, self.ttl);
        (deadline > Instant::now()).then_some(deadline)
    }
}

/// What a backend reports about a key, for operators ([`LockBackend::inspect`](crate::LockBackend::inspect)).
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

impl LockInfo {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A grant at `granted_us` by the server's clock, for 2 s.
    fn granted(granted_us: u64) -> HandedGrant {
        HandedGrant {
            token: FencingToken::new(7).unwrap(),
            granted_us,
            ttl: Duration::from_secs(2),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_handed_grant_counts_from_the_refused_try_less_the_drift() {
        let sent = Instant::now();
        let ttl = Duration::from_secs(2);
        // Granted 500 ms after the try by the server's clock: at least 495 ms here.
        let deadline = granted(1_500_000).valid_until(sent, 1_000_000).unwrap();
        let start = sent + Duration::from_millis(495);
        assert_eq!(deadline, valid_until(start, ttl));
        // In the same microsecond as the try: from the try's send.
        assert_eq!(
            granted(7).valid_until(sent, 7),
            Some(valid_until(sent, ttl))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_older_than_the_try_or_past_its_deadline_is_none() {
        let sent = Instant::now();
        assert_eq!(granted(1_499_999).valid_until(sent, 1_500_000), None);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(granted(1_000_000).valid_until(sent, 1_000_000), None);
        // Still ahead when the grant came late enough after the try.
        assert!(granted(2_000_000).valid_until(sent, 1_000_000).is_some());
    }
}
