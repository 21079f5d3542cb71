//! `FileLockBackend`: exclusive locks with fencing tokens in a directory.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, Fence, FencingToken, Lease, LockBackend, LockInfo, LockKey, LostReason,
    OwnerId, Result, TimeAuthority, TokenGuarantee, WakeUp, valid_until, validate_floor,
    validate_ttl,
};
use tokio::time::Instant;

use crate::layout::{BACKEND, Layout, Space, blocking};
use crate::state::{Holder, LockState, micros, now_micros};

/// The longest ttl accepted: one year.
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// How often [`LockBackend::wait_for_release`] looks at a held lock's state file.
const POLL: Duration = Duration::from_millis(10);

/// A [`LockBackend`] whose locks live in a directory of the local file system, shared by every
/// process of this host that opens the same directory. Clones share the directory.
///
/// Per key, one state file holds the token counter and the holder (owner, token, wall-clock
/// expiry). Every change is a read-modify-write under an exclusive advisory lock (`flock`)
/// of the key's lock file, written to a temporary file, flushed, renamed over the state file
/// and followed by a flush of the directory, before the call returns. So tokens strictly
/// increase per key forever, across processes, reopenings and crashes
/// ([`TokenGuarantee::Durable`], as far as the file system honours `fsync`).
///
/// **One host only.** Leases expire on this host's wall clock, which every process of the
/// host shares ([`TimeAuthority::Host`]: no server's clock decides). Processes on other
/// hosts, say through a network file system, do not share that clock (and `flock` over NFS
/// is not reliable either): mutual exclusion then does not hold, though the fenced storage
/// still refuses every stale holder. A wall clock set back while leases are held lengthens
/// them; one set forward ends them early, which the fence makes safe.
///
/// Shared (reader) locks are not offered; waiting polls ([`WakeUp::Poll`]).
#[derive(Debug, Clone)]
pub struct FileLockBackend {
    layout: Arc<Layout>,
}

impl FileLockBackend {
    /// Opens the locks in `dir`, creating the directory (and its parents) when missing. Two
    /// backends opened on the same directory, in one process or in several, share every lock
    /// and token counter.
    pub async fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let layout = Layout::new(dir.as_ref())?;
        let created = layout.clone();
        blocking(move || created.create(&[Space::Locks])).await?;
        Ok(FileLockBackend {
            layout: Arc::new(layout),
        })
    }

    /// The directory this backend's locks live in (absolute).
    pub fn dir(&self) -> &Path {
        self.layout.root()
    }

    /// Runs one locked read-modify-write of `key`'s lock state on the blocking pool. `change`
    /// gets the state (a fresh one for a key never used) and the wall clock read under the
    /// lock, and returns the state to write (`None` to leave the file as it is) and the result.
    async fn update<T, F>(&self, key: &LockKey, change: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(LockState, u64) -> Result<(Option<LockState>, T)> + Send + 'static,
    {
        let layout = self.layout.clone();
        let entry = layout.entry(Space::Locks, key);
        blocking(move || {
            layout.update(&entry, |bytes| {
                let path = entry.file("state");
                let state = match bytes {
                    Some(bytes) => LockState::decode(&path, bytes)?,
                    None => LockState::default(),
                };
                // Read under the lock, after the caller's send time: an expiry computed from
                // it is never earlier than the caller's own deadline.
                let (next, out) = change(state, now_micros()?)?;
                Ok((next.map(|s| s.encode()), out))
            })
        })
        .await
    }

    /// `key`'s lock state read without the lock, and the wall clock; `None` for a key never
    /// used.
    async fn read(&self, key: &LockKey) -> Result<(Option<LockState>, u64)> {
        let layout = self.layout.clone();
        let entry = layout.entry(Space::Locks, key);
        blocking(move || {
            let state = match layout.read(&entry)? {
                Some(bytes) => Some(LockState::decode(&entry.file("state"), &bytes)?),
                None => None,
            };
            Ok((state, now_micros()?))
        })
        .await
    }
}

fn exhausted() -> Error {
    Error::Backend {
        backend: BACKEND,
        message: "token counter exhausted".into(),
        source: None,
    }
}

#[async_trait]
impl LockBackend for FileLockBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(
            TokenGuarantee::Durable,
            TimeAuthority::Host,
            WakeUp::Poll,
            MAX_TTL,
        )
        // The state file outlives every process, and the host's reboot: a lease lasts until
        // its wall-clock expiry whatever happened to its holder.
        .with_locks_survive_restart(true)
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        let sent_at = Instant::now();
        let owner = OwnerId::random();
        let granted = self
            .update(key, move |mut state, now| {
                if state.live_holder(now).is_some() {
                    return Ok((None, None));
                }
                let next = state.last_token.checked_add(1).ok_or_else(exhausted)?;
                let token = FencingToken::new(next).ok_or_else(exhausted)?;
                state.last_token = next;
                state.holder = Some(Holder {
                    owner,
                    token,
                    expires_us: now.saturating_add(micros(ttl)),
                });
                Ok((Some(state), Some(token)))
            })
            .await?;
        Ok(granted.map(|token| Lease {
            key: key.clone(),
            owner,
            token,
            ttl,
            valid_until: valid_until(sent_at, ttl),
        }))
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        let sent_at = Instant::now();
        let ours = lease.fence();
        let outcome = self
            .update(&lease.key, move |mut state, now| {
                // Only the live holder is renewed: an expired or released lock is never
                // brought back, even when its file still names this lease.
                match state.live_holder(now) {
                    Some(h) if Fence::new(h.token, h.owner) == ours => {
                        state.holder = Some(Holder {
                            expires_us: now.saturating_add(micros(ttl)),
                            ..h
                        });
                        Ok((Some(state), Ok(())))
                    }
                    Some(_) => Ok((None, Err(LostReason::Superseded))),
                    None => Ok((None, Err(LostReason::NotHeld))),
                }
            })
            .await?;
        match outcome {
            Ok(()) => Ok(Lease {
                ttl,
                valid_until: valid_until(sent_at, ttl),
                ..lease.clone()
            }),
            Err(reason) => Err(Error::lease_lost(&lease.key, reason)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let ours = lease.fence();
        self.update(&lease.key, move |mut state, now| {
            let Some(holder) = state.holder else {
                return Ok((None, false));
            };
            if Fence::new(holder.token, holder.owner) != ours {
                return Ok((None, false));
            }
            state.holder = None;
            Ok((Some(state), holder.expires_us > now))
        })
        .await
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        let deadline = Instant::now().checked_add(max);
        loop {
            let (state, now) = self.read(key).await?;
            let Some(holder) = state.and_then(|s| s.live_holder(now)) else {
                return Ok(());
            };
            let left_in_lease = Duration::from_micros(holder.expires_us - now);
            let mut pause = POLL.min(left_in_lease);
            if let Some(deadline) = deadline {
                let at = Instant::now();
                if at >= deadline {
                    return Ok(());
                }
                pause = pause.min(deadline - at);
            }
            tokio::time::sleep(pause).await;
        }
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        let (state, now) = self.read(key).await?;
        let holder = state.and_then(|s| s.live_holder(now));
        let mut info = LockInfo::new(key.clone());
        info.holder = holder.map(|h| Fence::new(h.token, h.owner));
        info.remaining = holder.map(|h| Duration::from_micros(h.expires_us - now));
        info.last_token = state.and_then(|s| FencingToken::new(s.last_token));
        Ok(info)
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        validate_floor(floor, u64::MAX, "a lockdir counter")?;
        let last = self
            .update(key, move |mut state, _| {
                if state.last_token >= floor.get() {
                    return Ok((None, state.last_token));
                }
                state.last_token = floor.get();
                Ok((Some(state), state.last_token))
            })
            .await?;
        FencingToken::new(last).ok_or_else(exhausted)
    }
}
