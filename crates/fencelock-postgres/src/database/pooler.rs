//! Transaction-mode poolers: the protocol a setting implies, detecting one, and why the
//! advisory backend refuses to work behind one.

use fencelock_core::{Error, Result};
use sqlx::PgConnection;
use sqlx::postgres::PgConnectOptions;
use tokio::sync::OnceCell;

use super::{BACKEND, PgDatabase};
use crate::PgPooler;
use crate::error::timed;
use crate::exec::Protocol;

/// The protocol a pooler setting implies, unless it is left to detection.
pub(super) fn known(pooler: PgPooler) -> OnceCell<Protocol> {
    match pooler {
        PgPooler::None => OnceCell::new_with(Some(Protocol::Prepared)),
        PgPooler::Transaction => OnceCell::new_with(Some(Protocol::Simple)),
        _ => OnceCell::new(),
    }
}

/// Why the advisory backend cannot work through a transaction-mode pooler, and what to do.
pub(crate) fn advisory_behind_pooler(pooler: PgPooler) -> Error {
    let how = match pooler {
        PgPooler::Transaction => "the URL says ?pooler=transaction",
        _ => "one was detected: two sessions reported the same server process",
    };
    Error::config(format!(
        "the Postgres advisory backend holds each lock in a database session, which a \
         transaction-mode pooler (PgBouncer pool_mode = transaction) hands to other clients \
         between transactions ({how}): use backend=lease, or connect the advisory backend \
         directly to PostgreSQL (or through a session-mode pooler)"
    ))
}

impl PgDatabase {
    /// Whether fencelock treats the connections as going through a transaction-mode pooler:
    /// as configured, or, with [`PgPooler::Detect`], as found by the probe it runs on first
    /// use (and here, if nothing ran yet).
    pub async fn behind_transaction_pooler(&self) -> Result<bool> {
        Ok(self.protocol().await? == Protocol::Simple)
    }

    /// The protocol of fencelock's statements, probing for a pooler the first time when the
    /// setting is [`PgPooler::Detect`].
    pub(crate) async fn protocol(&self) -> Result<Protocol> {
        let inner = &self.inner;
        inner
            .protocol
            .get_or_try_init(|| async {
                let detected = timed(BACKEND, inner.timeout, probe_pooler(&inner.options)).await?;
                if detected {
                    tracing::warn!(
                        "a transaction-mode pooler was detected: fencelock sends its statements \
                         unprepared; say ?pooler=transaction to skip the probe"
                    );
                    Ok(Protocol::Simple)
                } else {
                    Ok(Protocol::Prepared)
                }
            })
            .await
            .copied()
    }

    /// The protocol, if known without a probe.
    pub(crate) fn known_protocol(&self) -> Option<Protocol> {
        self.inner.protocol.get().copied()
    }

    /// `Ok` unless the connections go through a transaction-mode pooler, where the advisory
    /// backend cannot hold a lock.
    pub(crate) async fn advisory_allowed(&self) -> Result<()> {
        if self.protocol().await? == Protocol::Simple {
            return Err(advisory_behind_pooler(self.inner.pooler));
        }
        Ok(())
    }
}

/// Whether the connections of `options` go through a transaction-mode pooler: two sessions
/// open at once that report the same server process can only be a pooler's clients sharing
/// one server connection (a pooler in transaction mode hands the most recently released
/// server connection out first). Sent with the simple protocol, so the probe leaves nothing
/// on a pooler's server connections.
fn probe_pooler(options: &PgConnectOptions) -> crate::exec::BoxFuture<'_, bool> {
    Box::pin(probe(options))
}

async fn probe(options: &PgConnectOptions) -> Result<bool, sqlx::Error> {
    use sqlx::{ConnectOptions, Connection, Executor};
    async fn pid(conn: &mut PgConnection) -> Result<i32, sqlx::Error> {
        let row = conn
            .fetch_one(sqlx::raw_sql("SELECT pg_backend_pid()"))
            .await?;
        sqlx::Row::try_get::<i32, _>(&row, 0)
    }
    let mut first = options.connect().await?;
    let mut second = options.connect().await?;
    // A session's own process changing between two statements proves it too.
    let mut shared = false;
    let mut seen = None;
    for _ in 0..2 {
        let a = pid(&mut first).await?;
        let b = pid(&mut second).await?;
        shared |= a == b || seen.is_some_and(|earlier| earlier != a);
        seen = Some(a);
    }
    let _ = first.close().await;
    let _ = second.close().await;
    Ok(shared)
}
