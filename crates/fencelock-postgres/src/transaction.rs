//! The transaction API: a lock, a token and fenced writes that commit or roll back together.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use fencelock_core::{Error, Fence, FencingToken, LockKey, LostReason, OwnerId, Result, Snapshot};
use sqlx::{PgConnection, Postgres, Transaction};
use tokio::time::Instant;
use tracing::Instrument;

use crate::PgStorage;
use crate::codec::{millis_setting, owner_bytes, token_param};
use crate::epoch::{self, Grant};
use crate::error::{map_sqlx_error, sqlstate, timed};
use crate::exec::{Arg, Protocol};
use crate::storage::BACKEND;

/// SQLSTATE of a session the server ended for sitting idle in a transaction past
/// `idle_in_transaction_session_timeout`.
const IDLE_IN_TRANSACTION_ENDED: &str = "25P03";

/// A boxed future borrowing for `'a`, as returned by the closure given to
/// [`PgStorage::transaction`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An open transaction that holds the transaction-level advisory lock of a key and a fresh
/// fencing token for it. Handed to the closure of [`PgStorage::transaction`].
///
/// Fenced reads and writes through it, and any SQL run on [`connection`](Self::connection),
/// commit together when the closure returns `Ok`, or roll back together when it returns `Err`.
#[derive(Debug)]
pub struct FencedTransaction {
    tx: Transaction<'static, Postgres>,
    key: LockKey,
    fence: Fence,
    storage: PgStorage,
}

impl FencedTransaction {
    /// The locked key.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// The fence this transaction presents to the storage.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// The transaction's fencing token.
    pub fn token(&self) -> FencingToken {
        self.fence.token
    }

    /// The transaction's connection, for the caller's own SQL. Its `search_path` is the
    /// pool's own (fencelock qualifies its objects and sets nothing), so unqualified names
    /// such as `accounts` mean the caller's tables. Map `sqlx` errors with
    /// [`map_sqlx_error`](crate::map_sqlx_error).
    pub fn connection(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// A fenced read of `resource` within the transaction. `resource` is a name as
    /// [`Locker::lock`](fencelock_core::Locker::lock) takes it; an invalid one is
    /// [`Error::InvalidKey`], and nothing is sent.
    pub async fn read(&mut self, resource: impl AsRef<str>) -> Result<Option<Vec<u8>>> {
        let resource = &LockKey::new(resource)?;
        self.storage
            .apply(&mut *self.tx, resource, self.fence, None)
            .await
    }

    /// A fenced write of `resource` within the transaction. A refused write is
    /// [`Error::Stale`]; returning it from the closure rolls everything back. An invalid
    /// `resource` name is [`Error::InvalidKey`], and nothing is sent.
    pub async fn write(&mut self, resource: impl AsRef<str>, value: &[u8]) -> Result<()> {
        let resource = &LockKey::new(resource)?;
        self.storage
            .apply(&mut *self.tx, resource, self.fence, Some(value))
            .await
            .map(drop)
    }

    /// The unfenced view of `resource` within the transaction (seeing its own writes). An
    /// invalid `resource` name is [`Error::InvalidKey`], and nothing is sent.
    pub async fn peek(&mut self, resource: impl AsRef<str>) -> Result<Option<Snapshot>> {
        let resource = &LockKey::new(resource)?;
        self.storage.peek_on(&mut *self.tx, resource).await
    }
}

impl PgStorage {
    /// Runs `f` inside one transaction that holds `pg_advisory_xact_lock` on `key` and a fresh
    /// fencing token for it; everything `f` does through the [`FencedTransaction`] commits if
    /// it returns `Ok` and rolls back if it returns `Err`.
    ///
    /// The lock is the advisory lock id of `key` (see [`PgDatabase::advisory_lock_id`](crate::PgDatabase::advisory_lock_id)),
    /// so it also excludes [`PgAdvisoryBackend`](crate::PgAdvisoryBackend) holders of the same
    /// key. Waiting for it is bounded by `wait` (server-side, `lock_timeout`); past it the call
    /// fails with [`Error::Timeout`]. The token is taken once the lock is held, from the key's
    /// counter, on a connection of its own and committed at once (outside the transaction):
    /// a rolled-back transaction leaves no trace but its token, which no later grant of the
    /// key gets again. Behind a transaction-mode pooler this works the same, every statement
    /// going as one simple-protocol message; the token statement then needs a second server
    /// connection of the pooler for a moment (see the crate's README, *Transactions*).
    ///
    /// A transaction that sits idle (the closure awaiting something else, the process paused)
    /// for longer than [`PgDatabase::idle_in_transaction_timeout`](crate::PgDatabase::idle_in_transaction_timeout)
    /// (default 30 s) is ended by the server: it rolls back and its lock is free for others at
    /// once, and the commit fails with [`Error::LeaseLost`]
    /// ([`LostReason::SessionEnded`]); nothing of it is committed.
    ///
    /// ```no_run
    /// # async fn demo(storage: fencelock_postgres::PgStorage) -> fencelock_core::Result<()> {
    /// use std::time::Duration;
    /// let balance = storage
    ///     .transaction("account/7", Duration::from_secs(5), move |tx| {
    ///         Box::pin(async move {
    ///             let old = tx.read("account/7").await?.unwrap_or_default();
    ///             let mut next = u64::from_le_bytes(old.try_into().unwrap_or_default());
    ///             next += 10;
    ///             tx.write("account/7", &next.to_le_bytes()).await?;
    ///             Ok::<_, fencelock_core::Error>(next)
    ///         })
    ///     })
    ///     .await?;
    /// # let _ = balance; Ok(()) }
    /// ```
    pub async fn transaction<T, E, F>(
        &self,
        key: impl AsRef<str>,
        wait: Duration,
        f: F,
    ) -> Result<T, E>
    where
        T: Send,
        E: From<Error> + Send,
        F: for<'t> FnOnce(&'t mut FencedTransaction) -> BoxFuture<'t, Result<T, E>> + Send,
    {
        let key = &LockKey::new(key)?;
        let span = tracing::debug_span!("fencelock.pg.transaction", key = %key);
        async {
            let mut locked = self.begin_locked(key, wait).await?;
            tracing::debug!(token = locked.fence.token.get(), "locked");
            let outcome = f(&mut locked).await;
            self.finish(locked, outcome).await
        }
        .instrument(span)
        .await
    }

    /// [`transaction`](Self::transaction) with an `async` closure: no `Box::pin`, the
    /// transaction borrowed for the closure's run. Same lock, token, commit and rollback.
    ///
    /// ```no_run
    /// # async fn demo(storage: fencelock_postgres::PgStorage) -> fencelock_core::Result<()> {
    /// use std::time::Duration;
    /// let account = "account/7";
    /// let balance = storage
    ///     .transaction_with(account, Duration::from_secs(5), async |tx| -> fencelock_core::Result<u64> {
    ///         let old = tx.read(account).await?.unwrap_or_default();
    ///         let next = u64::from_le_bytes(old.try_into().unwrap_or_default()) + 10;
    ///         tx.write(account, &next.to_le_bytes()).await?;
    ///         Ok(next)
    ///     })
    ///     .await?;
    /// # let _ = balance; Ok(()) }
    /// ```
    pub async fn transaction_with<T, E, F>(
        &self,
        key: impl AsRef<str>,
        wait: Duration,
        f: F,
    ) -> Result<T, E>
    where
        T: Send,
        E: From<Error> + Send,
        F: AsyncFnOnce(&mut FencedTransaction) -> Result<T, E> + Send,
    {
        let key = &LockKey::new(key)?;
        let span = tracing::debug_span!("fencelock.pg.transaction", key = %key);
        async {
            let mut locked = self.begin_locked(key, wait).await?;
            tracing::debug!(token = locked.fence.token.get(), "locked");
            let outcome = f(&mut locked).await;
            self.finish(locked, outcome).await
        }
        .instrument(span)
        .await
    }

    /// Commits after `Ok`, rolls back after `Err`.
    async fn finish<T, E: From<Error>>(
        &self,
        locked: FencedTransaction,
        outcome: Result<T, E>,
    ) -> Result<T, E> {
        match outcome {
            Ok(value) => {
                let key = locked.key.clone();
                let committed = tokio::time::timeout(self.timeout(), locked.tx.commit()).await;
                match committed {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) if sqlstate(&e).as_deref() == Some(IDLE_IN_TRANSACTION_ENDED) => {
                        tracing::warn!(
                            key = %key,
                            limit = ?self.database().idle_in_transaction_timeout(),
                            "the server ended the transaction: it sat idle past \
                             idle_in_transaction_timeout; nothing was committed"
                        );
                        return Err(Error::lease_lost(&key, LostReason::SessionEnded).into());
                    }
                    Ok(Err(e)) => return Err(map_sqlx_error(BACKEND, e).into()),
                    Err(_) => return Err(crate::error::timed_out(BACKEND, self.timeout()).into()),
                }
                tracing::debug!(outcome = "committed");
                Ok(value)
            }
            Err(error) => {
                // A failed rollback still ends the transaction: the connection is closed.
                let _ = timed(BACKEND, self.timeout(), locked.tx.rollback()).await;
                tracing::debug!(outcome = "rolled back");
                Err(error)
            }
        }
    }

    async fn begin_locked(&self, key: &LockKey, wait: Duration) -> Result<FencedTransaction> {
        let started = Instant::now();
        let protocol = self.database().protocol().await?;
        let mut tx = timed(BACKEND, self.timeout(), self.database().pool().begin()).await?;
        // lock_timeout = 0 would mean "wait forever".
        let wait = wait.max(Duration::from_millis(1));
        let setting = millis_setting(wait);
        let idle = millis_setting(self.database().idle_in_transaction_timeout());
        let bound = wait.saturating_add(self.timeout());
        let outcome = tokio::time::timeout(
            bound,
            self.database()
                .sql()
                .xact_lock
                .fetch_one::<(String, String, String), _>(
                    protocol,
                    &mut *tx,
                    &[
                        Arg::Int8(self.database().advisory_lock_id(key)),
                        Arg::Text(&setting),
                        Arg::Text(&idle),
                    ],
                ),
        )
        .await;
        match outcome {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if sqlstate(&e).as_deref() == Some("55P03") => {
                return Err(Error::Timeout {
                    key: key.to_string(),
                    waited: started.elapsed(),
                });
            }
            Ok(Err(e)) => return Err(map_sqlx_error(BACKEND, e)),
            Err(_) => return Err(crate::error::timed_out(BACKEND, bound)),
        }
        // On an error below, dropping `tx` rolls it back and frees the lock.
        let token = self.grant_token(key, protocol).await?;
        let fence = Fence::new(token, OwnerId::random());
        // Every time: the statement reads the schema's mechanism, which may have changed
        // since the last transaction (the binding row deleted, the other mechanism bound).
        self.claim_lease_row(&mut tx, protocol, key, fence, wait, started)
            .await?;
        Ok(FencedTransaction {
            tx,
            key: key.clone(),
            fence,
            storage: self.clone(),
        })
    }

    /// The key's next token, taken while the caller's transaction holds the key's lock, on a
    /// connection of its own and committed at once: whatever becomes of the transaction, the
    /// token is used up, so no later grant of the key gets it again.
    async fn grant_token(&self, key: &LockKey, protocol: Protocol) -> Result<FencingToken> {
        let db = self.database();
        let args = [Arg::Text(key.as_str())];
        for _ in 0..epoch::TRIES {
            let (token, live, exhausted): (Option<i64>, Option<i64>, bool) = timed(
                BACKEND,
                self.timeout(),
                db.sql().token_grant.fetch_one(protocol, db.tokens(), &args),
            )
            .await?;
            match Grant::from_columns(token, live, exhausted) {
                Grant::Token(token) => return FencingToken::from_backend(BACKEND, token),
                Grant::NewEpoch(seen) => {
                    epoch::start_new(db, BACKEND, protocol, db.tokens(), seen).await?;
                }
                // A racing grant used up the counter since the statement's snapshot: again.
                Grant::Refused => {}
            }
        }
        Err(epoch::no_token(BACKEND))
    }

    /// Unless the schema is bound to advisory locks, claims the key's lease row for the
    /// transaction (until it ends), so lease holders and the transaction exclude each other;
    /// waits for a live lease to end, within `wait` from `started`.
    async fn claim_lease_row(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        protocol: Protocol,
        key: &LockKey,
        fence: Fence,
        wait: Duration,
        started: Instant,
    ) -> Result<()> {
        let db = self.database();
        let owner = owner_bytes(fence.owner);
        let token = token_param(BACKEND, fence.token)?;
        let timeout = || Error::Timeout {
            key: key.to_string(),
            waited: started.elapsed(),
        };
        loop {
            let bound = wait.saturating_add(self.timeout());
            let outcome = tokio::time::timeout(
                bound,
                db.sql()
                    .xact_claim
                    .fetch_one::<(Option<String>, Option<bool>), _>(
                        protocol,
                        &mut **tx,
                        &[
                            Arg::Text(key.as_str()),
                            Arg::Bytea(&owner),
                            Arg::Int8(token),
                        ],
                    ),
            )
            .await;
            let (_mechanism, claimed) = match outcome {
                Ok(Ok(row)) => row,
                Ok(Err(e)) if sqlstate(&e).as_deref() == Some("55P03") => return Err(timeout()),
                Ok(Err(e)) => return Err(map_sqlx_error(BACKEND, e)),
                Err(_) => return Err(crate::error::timed_out(BACKEND, bound)),
            };
            if claimed != Some(false) {
                return Ok(());
            }
            let left = wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(timeout());
            }
            // The transaction is idle meanwhile: ask again before the idle bound ends it.
            let idle = db.idle_in_transaction_timeout();
            let pause = if idle.is_zero() {
                left
            } else {
                left.min(idle / 2)
            };
            fencelock_core::LockBackend::wait_for_release(&db.lease_backend(), key, pause).await?;
        }
    }
}
