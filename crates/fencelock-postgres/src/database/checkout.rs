//! Checking a connection out of a pool when it may have to open one, and a server that
//! refuses new connections as full (SQLSTATE `53300`, "too many clients").
//!
//! sqlx's pool treats that refusal as transient: it connects again and again inside one
//! `acquire`, with a backoff of its own, until the acquire's time-out, and then says only
//! "pool timed out". Every waiter of a process doing so at once would ask a full server for
//! a connection dozens of times a second, and nobody would learn why the waits stretch. So a
//! checkout that may open a connection goes through here:
//!
//! - One at a time per database: the others wait their turn behind it (a pool at its size,
//!   or with an idle connection, opens none, and is checked out directly).
//! - A checkout that timed out is explained by one diagnostic connect (at most one a second,
//!   shared by every checkout that timed out meanwhile). A refusal as full closes the
//!   database's [`FullServer`] gate: until its pause ends, a checkout that would open a
//!   connection takes one the pool gives back within its time-out, or fails with
//!   [`Error::Unavailable`] naming the server, what it said, and the settings to change;
//!   then one checkout probes again. A diagnostic connect that
//!   succeeds says the pool's connections were all busy instead, and how many there are.
//!
//! Statements on fencelock's pool take it as [`Checked`] (an `Acquire` of sqlx's), so every
//! checkout of theirs goes through here too; the explanation rides in sqlx's error as an I/O
//! error's payload ([`Explained`]), which [`map_sqlx_error`] turns back into
//! [`Error::Unavailable`] with its message.
//!
//! Grant tries take the pool as [`CheckedTry`]: they share all of its connections but a
//! reserve ([`reserved`]), which they never hold, so however many waiters of the process
//! try at once, a holder's extend or release finds a connection within its time-out.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, FullServer, FullServerEntry, Result};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgConnection;
use sqlx::{Acquire, Connection, PgPool, Postgres, Transaction};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{BACKEND, PgDatabase};
use crate::error::timed;
use crate::exec::BoxFuture;

/// SQLSTATE `too_many_connections`.
const TOO_MANY_CONNECTIONS: &str = "53300";

/// How often a checkout that may not open a connection (the server is full) looks for one
/// given back to the pool.
const RETURNED_POLL: Duration = Duration::from_millis(5);

/// How long a diagnosis is the answer for every checkout that timed out.
const DIAGNOSIS_LASTS: Duration = Duration::from_secs(1);

/// The longest a diagnostic connect may take (and a fifth of the operation time-out).
const DIAGNOSE_WITHIN: Duration = Duration::from_secs(2);

/// What the last diagnostic connect found.
#[derive(Debug, Clone)]
enum Found {
    /// The server refused it as full, saying this.
    Full(String),
    /// It connected: the server has room.
    Room,
    /// It failed otherwise, or did not answer in time.
    Unknown,
}

/// The checkouts of one database (see the module's documentation).
#[derive(Debug)]
pub(super) struct Checkouts {
    gate: FullServer,
    one_at_a_time: Semaphore,
    last: Mutex<Option<(Instant, Found)>>,
    /// Grant tries' share of fencelock's pool: its size less [`reserved`].
    tries: Arc<Semaphore>,
}

impl Checkouts {
    /// The checkouts of a database whose pool has `pool_size` connections.
    pub(super) fn new(pool_size: u32) -> Self {
        Checkouts {
            gate: FullServer::new(),
            one_at_a_time: Semaphore::new(1),
            last: Mutex::new(None),
            tries: Arc::new(Semaphore::new(tries_share(pool_size) as usize)),
        }
    }
}

/// How many connections of a pool of `pool_size` grant tries leave to everything else (a
/// holder's extend and release above all): a quarter, and at least one once the pool has two.
/// A pool of one is shared (a reserve there would leave the tries nothing).
fn reserved(pool_size: u32) -> u32 {
    if pool_size < 2 {
        0
    } else {
        (pool_size / 4).max(1)
    }
}

/// How many connections of a pool of `pool_size` grant tries may hold at once.
fn tries_share(pool_size: u32) -> u32 {
    pool_size.saturating_sub(reserved(pool_size)).max(1)
}

/// A checkout refused or timed out, explained: the message of the [`Error::Unavailable`] that
/// [`map_sqlx_error`] makes of the I/O error carrying it.
#[derive(Debug)]
pub(crate) struct Explained(pub(crate) String);

impl fmt::Display for Explained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Explained {}

fn explained(message: String) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::other(Explained(message)))
}

/// fencelock's pool of `db`, as sqlx statements take it, each checkout through
/// [`PgDatabase::checkout`]'s turn and gate.
#[derive(Clone, Copy)]
pub(crate) struct Checked<'a> {
    db: &'a PgDatabase,
}

impl<'a> Acquire<'a> for Checked<'a> {
    type Database = Postgres;
    type Connection = PoolConnection<Postgres>;

    fn acquire(self) -> BoxFuture<'a, PoolConnection<Postgres>> {
        Box::pin(self.db.checkout_sqlx(&self.db.inner.pool))
    }

    /// No statement of fencelock's begins a transaction through this: it is begun on the pool.
    fn begin(self) -> BoxFuture<'a, Transaction<'a, Postgres>> {
        let pool = &self.db.inner.pool;
        Box::pin(async move {
            let tx: Transaction<'a, Postgres> = pool.begin().await?;
            Ok(tx)
        })
    }
}

/// fencelock's pool as a grant try takes it: [`Checked`], within the tries' share of the
/// pool's connections (see the module's documentation).
#[derive(Clone, Copy)]
pub(crate) struct CheckedTry<'a> {
    db: &'a PgDatabase,
}

/// A connection of a grant try, and its place in the tries' share until it goes back.
pub(crate) struct TryConnection {
    conn: PoolConnection<Postgres>,
    _share: OwnedSemaphorePermit,
}

impl Deref for TryConnection {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl DerefMut for TryConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

impl<'a> Acquire<'a> for CheckedTry<'a> {
    type Database = Postgres;
    type Connection = TryConnection;

    fn acquire(self) -> BoxFuture<'a, TryConnection> {
        Box::pin(async move {
            let db = self.db;
            let pool = &db.inner.pool;
            let budget = db.inner.timeout.mul_f64(0.75);
            let share = db.inner.checkouts.tries.clone().acquire_owned();
            let share = match tokio::time::timeout(budget, share).await {
                Ok(Ok(share)) => share,
                Ok(Err(_closed)) => return Err(sqlx::Error::PoolClosed),
                Err(_) => return Err(explained(db.tries_busy_message(pool))),
            };
            let conn = db.checkout_sqlx(pool).await?;
            Ok(TryConnection {
                conn,
                _share: share,
            })
        })
    }

    /// No statement of fencelock's begins a transaction through this.
    fn begin(self) -> BoxFuture<'a, Transaction<'a, Postgres>> {
        Checked { db: self.db }.begin()
    }
}

impl PgDatabase {
    /// fencelock's pool, each checkout through the turn and the gate (see the module's
    /// documentation).
    pub(crate) fn checked(&self) -> Checked<'_> {
        Checked { db: self }
    }

    /// fencelock's pool as a grant try takes it: [`checked`](Self::checked), within the
    /// tries' share, so that the reserve stays for holders (see the module's documentation).
    pub(crate) fn checked_try(&self) -> CheckedTry<'_> {
        CheckedTry { db: self }
    }

    /// A connection of `pool`, within `limit`; see the module's documentation.
    pub(crate) async fn checkout(
        &self,
        pool: &PgPool,
        limit: Duration,
    ) -> Result<PoolConnection<Postgres>> {
        timed(BACKEND, limit, self.checkout_sqlx(pool)).await
    }

    /// [`checkout`](Self::checkout), its explanations carried as [`Explained`]. It waits three
    /// quarters of the operation time-out at most, so the explanation is ready before the
    /// caller's time-out.
    async fn checkout_sqlx(&self, pool: &PgPool) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        let budget = self.inner.timeout.mul_f64(0.75);
        let may_connect =
            pool.num_idle() == 0 && pool.size() < pool.options().get_max_connections();
        if !may_connect {
            // An idle connection, or one given back: no connect, nothing to gate.
            return match pool.acquire().await {
                Err(sqlx::Error::PoolTimedOut) => Err(explained(self.explain(pool).await)),
                other => other,
            };
        }
        let checkouts = &self.inner.checkouts;
        if let FullServerEntry::Full { said, retry_in } = checkouts.gate.enter() {
            // No new connection now; one the pool has may come back within the budget (a
            // holder's extend goes on while the server is full).
            if pool.size() > 0 {
                let until = tokio::time::Instant::now() + budget;
                while tokio::time::Instant::now() < until {
                    if let Some(conn) = pool.try_acquire() {
                        return Ok(conn);
                    }
                    tokio::time::sleep(RETURNED_POLL).await;
                }
            }
            return Err(explained(self.full_message(&said, retry_in)));
        }
        let outcome = tokio::time::timeout(budget, async {
            let _turn = checkouts.one_at_a_time.acquire().await;
            pool.acquire().await
        })
        .await;
        match outcome {
            Ok(Ok(conn)) => {
                checkouts.gate.connected();
                Ok(conn)
            }
            Ok(Err(sqlx::Error::PoolTimedOut)) | Err(_) => Err(explained(self.explain(pool).await)),
            Ok(Err(e)) => {
                checkouts.gate.abandoned();
                Err(e)
            }
        }
    }

    /// Why a checkout of `pool` timed out, from the last diagnostic connect, or a new one.
    async fn explain(&self, pool: &PgPool) -> String {
        match self.diagnosis().await {
            Some(full) => full,
            None => self.busy_message(pool),
        }
    }

    /// `error`, the failure of a call that may have waited for a new connection, or, when
    /// the server refuses new connections as full, the error that says so.
    pub(crate) async fn full_or(&self, error: Error) -> Error {
        let waited = match &error {
            Error::Unavailable { source, .. } => source
                .as_deref()
                .and_then(|s| s.downcast_ref::<sqlx::Error>())
                .is_none_or(|s| matches!(s, sqlx::Error::PoolTimedOut)),
            _ => false,
        };
        if !waited {
            return error;
        }
        match self.diagnosis().await {
            Some(message) => Error::Unavailable {
                backend: BACKEND,
                message,
                source: None,
            },
            None => error,
        }
    }

    /// What to say of a server that refuses new connections as full, or `None` when it does
    /// not (or cannot be asked), from the last diagnostic connect or a new one; the gate
    /// learns the outcome.
    async fn diagnosis(&self) -> Option<String> {
        let checkouts = &self.inner.checkouts;
        let mut last = checkouts.last.lock().await;
        let found = match &*last {
            Some((at, found)) if at.elapsed() < DIAGNOSIS_LASTS => found.clone(),
            _ => {
                let found = self.diagnose().await;
                *last = Some((Instant::now(), found.clone()));
                found
            }
        };
        drop(last);
        match found {
            Found::Full(said) => {
                let (retry_in, first) = checkouts.gate.refused(&said);
                let message = self.full_message(&said, retry_in);
                if first {
                    tracing::warn!("{message}");
                }
                Some(message)
            }
            Found::Room => {
                checkouts.gate.connected();
                None
            }
            Found::Unknown => {
                checkouts.gate.abandoned();
                None
            }
        }
    }

    /// One connect of the pools' own options, closed at once.
    async fn diagnose(&self) -> Found {
        let connect = PgConnection::connect_with(&self.inner.options);
        let within = DIAGNOSE_WITHIN.min(self.inner.timeout / 5);
        match tokio::time::timeout(within, connect).await {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
                Found::Room
            }
            Ok(Err(sqlx::Error::Database(e)))
                if e.code().as_deref() == Some(TOO_MANY_CONNECTIONS) =>
            {
                Found::Full(format!("SQLSTATE {TOO_MANY_CONNECTIONS}: {}", e.message()))
            }
            Ok(Err(_)) | Err(_) => Found::Unknown,
        }
    }

    /// The server, as `host:port` (never a password).
    fn server(&self) -> String {
        let options = &self.inner.options;
        format!("{}:{}", options.get_host(), options.get_port())
    }

    fn full_message(&self, said: &str, retry_in: Duration) -> String {
        format!(
            "PostgreSQL server {} refused a new connection as full ({said}): raise the \
                 server's max_connections, or open fewer connections from this process \
                 (PgConfig::pool_size, now {}, and holder_pool_size, now {}); the next connect \
                 is in {retry_in:?} at the earliest",
            self.server(),
            self.inner.pool.options().get_max_connections(),
            self.inner.holders.options().get_max_connections(),
        )
    }

    fn tries_busy_message(&self, pool: &PgPool) -> String {
        let size = pool.options().get_max_connections();
        format!(
            "no connection to PostgreSQL server {} within the operation time-out: this \
             process's grant tries held all {} connections of their share (PgConfig::pool_size, \
             now {size}, less the {} kept for holders' renewals and releases); raise \
             PgConfig::pool_size, or the operation time-out",
            self.server(),
            tries_share(size),
            reserved(size),
        )
    }

    fn busy_message(&self, pool: &PgPool) -> String {
        let which = if std::ptr::eq(pool, &self.inner.holders) {
            "holder_pool_size"
        } else {
            "pool_size"
        };
        format!(
            "no connection to PostgreSQL server {} within the operation time-out: the pool's \
             {} connections were busy, or new ones did not open in time (raise \
             PgConfig::{which}, or the operation time-out)",
            self.server(),
            pool.options().get_max_connections(),
        )
    }
}
