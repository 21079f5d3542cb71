//! `MySqlDatabase`: the pools, the installed objects of one prefix, and what the server told
//! us at connect time.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, FullServer, FullServerEntry, LockBackend, Result, TokenGuarantee};
use sqlx::ConnectOptions;
use sqlx::MySql;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::pool::PoolConnection;

use crate::config::{DEFAULT_MAX_VALUE_LEN, MySqlBackendKind, MySqlConfig};
use crate::error::{
    BACKEND, TOO_MANY_CONNECTIONS, map_sqlx_error, server_error_number, timed, timed_out,
};
use crate::greeting::{self, Peer};
use crate::schema::Statements;
use crate::{MySqlFence, MySqlLockBackend, MySqlStorage};

/// Room left in `max_allowed_packet` for everything of a write that is not the value.
const PACKET_OVERHEAD: usize = 64 << 10;

/// The smallest `max_value_len` accepted: the conformance suite writes 1 MiB values.
const MIN_VALUE_LEN: usize = 1 << 20;

/// How long an idle pooled connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A pooled connection used again within this long is not tested first: see
/// [`pool_options`].
const TESTED_AFTER_IDLE: Duration = Duration::from_millis(500);

/// A connected MySQL or MariaDB database with fencelock's tables and procedures installed:
/// where the lock backend, the storage and the fence come from. Cheap to clone.
///
/// It keeps two pools: a shared one for short statements (`inspect`, the storage,
/// `advance_token`) and one of *sessions*, connections that hold a `GET_LOCK` for the life of
/// a lease or block in one while a waiter waits.
#[derive(Clone)]
pub struct MySqlDatabase {
    inner: Arc<Inner>,
}

struct Inner {
    pool: MySqlPool,
    sessions: MySqlPool,
    sql: Statements,
    kind: MySqlBackendKind,
    operation_timeout: Duration,
    max_value_len: usize,
    tokens: TokenGuarantee,
    server_version: String,
    /// The server, as errors name it (`MySQL server host:port`).
    server: String,
    /// The session pool's size, which the message of a full server names.
    session_pool_size: u32,
    /// New session connections while the server refuses them as full.
    full: FullServer,
}

impl fmt::Debug for MySqlDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlDatabase")
            .field("prefix", &self.inner.sql.prefix)
            .field("server_version", &self.inner.server_version)
            .field("max_value_len", &self.inner.max_value_len)
            .field("tokens", &self.inner.tokens)
            .finish_non_exhaustive()
    }
}

impl MySqlDatabase {
    pub(crate) async fn connect(config: &MySqlConfig) -> Result<Self> {
        let sql = Statements::new(&config.prefix)?;
        let options = config.connect_options()?.disable_statement_logging();
        let timeout = config.operation_timeout;
        let server = config.hosts().first().map_or_else(
            || "MySQL server".to_owned(),
            |s| format!("MySQL server {s}"),
        );
        // The first connection is opened outside the pools: a pool tries a refused connect
        // again until its time-out and then says only that it timed out, not why.
        // A server that does not greet within a moment is probed on a connection of its
        // own: Redis or PostgreSQL at a MySQL URL is named now, not after the time-out.
        let connect = async {
            match tokio::time::timeout(timeout, options.connect()).await {
                // A certificate that does not check, or a server without TLS where TLS is
                // required: the configuration's to change, not a passing failure.
                Ok(Err(e)) if crate::tls::failed_tls(&e) => Err(Error::InvalidConfig {
                    message: format!(
                        "TLS failed ({e}): check the URL's ssl-mode, and that ssl-ca is the CA \
                         that signed the server's certificate"
                    ),
                    source: Some(Box::new(e)),
                }),
                Ok(Ok(conn)) => Ok(conn),
                Ok(Err(e)) => Err(map_sqlx_error(BACKEND, e)),
                Err(_) => Err(timed_out(timeout)),
            }
        };
        let not_mysql = async {
            tokio::time::sleep(greeting::GREETING_WAIT).await;
            for host in config.hosts() {
                if let Peer::NotMySql(why) = greeting::probe(&host).await {
                    return why;
                }
            }
            std::future::pending().await
        };
        let mut first = tokio::select! {
            first = connect => first.map_err(|e| e.in_context(&server))?,
            why = not_mysql => return Err(greeting::not_mysql(&server, why)),
        };
        let settings = timed(
            timeout,
            sqlx::query_as(
                "SELECT VERSION(), CAST(@@max_allowed_packet AS SIGNED), \
                 CAST(@@innodb_flush_log_at_trx_commit AS SIGNED)",
            )
            .fetch_one(&mut first),
        )
        .await
        .map_err(|e| e.in_context(&server));
        // Closing is a courtesy to the server (no aborted connection in its counters).
        let _ = tokio::time::timeout(timeout, sqlx::Connection::close(first)).await;
        let (version, packet, flush): (String, i64, i64) = settings?;
        let pool = pool_options(config.pool_size, timeout).connect_lazy_with(options.clone());
        let sessions = pool_options(config.session_pool_size, timeout).connect_lazy_with(options);
        let max_value_len = value_limit(config.max_value_len, packet)?;
        // 1 flushes the redo log at every commit; MariaDB's 3 does too, with group commit.
        // 0 and 2 can lose the last second of commits in a crash, the start of the live token
        // epoch included, and then the next epoch repeats its tokens.
        let tokens = if matches!(flush, 1 | 3) {
            TokenGuarantee::Durable
        } else {
            TokenGuarantee::DurableIfServerPersists {
                server_persists: Some(false),
            }
        };
        if config.install {
            sql.install(&pool).await?;
        }
        Ok(MySqlDatabase {
            inner: Arc::new(Inner {
                pool,
                sessions,
                sql,
                kind: config.backend,
                operation_timeout: timeout,
                max_value_len,
                tokens,
                server_version: version,
                server,
                session_pool_size: config.session_pool_size,
                full: FullServer::new(),
            }),
        })
    }

    /// The shared pool: use it for your own statements, and for
    /// [`MySqlFence::admit`](crate::MySqlFence::admit) inside your transactions.
    pub fn pool(&self) -> &MySqlPool {
        &self.inner.pool
    }

    /// A connection of the session pool (one per lease, waiter and watch), within `limit`.
    /// A server that refuses connections as full (error 1040) is not asked again by every
    /// caller: one connect at a time goes through, after a growing pause, and the others are
    /// told at once that the server is full, naming the setting to change ([`FullServer`]).
    pub(crate) async fn session(&self, limit: Duration) -> Result<PoolConnection<MySql>> {
        let inner = &self.inner;
        if let FullServerEntry::Full { said, retry_in } = inner.full.enter() {
            return Err(self.full_error(&said, retry_in));
        }
        match tokio::time::timeout(limit, inner.sessions.acquire()).await {
            Ok(Ok(conn)) => {
                inner.full.connected();
                Ok(conn)
            }
            Ok(Err(e)) if server_error_number(&e) == Some(TOO_MANY_CONNECTIONS) => {
                let said = e.to_string();
                let (retry_in, first) = inner.full.refused(&said);
                let error = self.full_error(&said, retry_in);
                if first {
                    tracing::warn!("{error}");
                }
                Err(error)
            }
            Ok(Err(e)) => {
                inner.full.abandoned();
                Err(map_sqlx_error(BACKEND, e))
            }
            Err(_) => {
                inner.full.abandoned();
                Err(timed_out(limit))
            }
        }
    }

    fn full_error(&self, said: &str, retry_in: Duration) -> Error {
        let inner = &self.inner;
        Error::Unavailable {
            backend: BACKEND,
            message: format!(
                "{} refused a new connection as full ({said}): raise the server's \
                 max_connections, or open fewer connections from this process (the URL's \
                 session_pool_size, now {}); the next connect is in {retry_in:?} at the \
                 earliest",
                inner.server, inner.session_pool_size
            ),
            source: None,
        }
    }

    pub(crate) fn sql(&self) -> &Statements {
        &self.inner.sql
    }

    pub(crate) fn operation_timeout(&self) -> Duration {
        self.inner.operation_timeout
    }

    pub(crate) fn tokens(&self) -> TokenGuarantee {
        self.inner.tokens
    }

    /// The prefix of fencelock's tables and procedures.
    pub fn prefix(&self) -> &str {
        &self.inner.sql.prefix
    }

    /// The server's `VERSION()`, as read at connect time.
    pub fn server_version(&self) -> &str {
        &self.inner.server_version
    }

    /// The largest value the storage accepts: the configured or default maximum, lowered to
    /// what the server's `max_allowed_packet` carries.
    pub fn max_value_len(&self) -> usize {
        self.inner.max_value_len
    }

    /// The names of the tables and procedures this database uses (tables first), for an
    /// operator who installs them by hand or grants privileges on them.
    pub fn object_names(&self) -> Vec<String> {
        self.inner.sql.object_names()
    }

    /// The `GET_LOCK` backend on this database. Clones of it share held sessions and
    /// waiters; two calls give two independent backends.
    pub fn lock_backend(&self) -> MySqlLockBackend {
        MySqlLockBackend::new(self)
    }

    /// The lock backend the config chose (`?backend=`), as a trait object.
    pub fn backend(&self) -> Arc<dyn LockBackend> {
        match self.inner.kind {
            MySqlBackendKind::GetLock => Arc::new(self.lock_backend()),
        }
    }

    /// The size of the pool of holding sessions: each held lock keeps one.
    pub(crate) fn session_pool_size(&self) -> u32 {
        self.inner.sessions.options().get_max_connections()
    }

    /// The fenced storage table of this database.
    pub fn storage(&self) -> MySqlStorage {
        MySqlStorage::new(self)
    }

    /// The fence check to run inside your own transactions.
    pub fn fence(&self) -> MySqlFence {
        MySqlFence::from_statements(self.inner.sql.clone())
    }

    /// Closes both pools: later operations fail with [`Error::Unavailable`]. Waits until the
    /// connections in use are back: a lease still held keeps it waiting until it is released
    /// or lost, so release first ([`Locker::shutdown`](fencelock_core::Locker::shutdown)
    /// releases a locker's guards).
    pub async fn close(&self) {
        self.inner.sessions.close().await;
        self.inner.pool.close().await;
    }

    /// Drops every table and procedure of this prefix. **The token epoch and counters go with
    /// them**: a later installation starts every key's tokens at 1 again, below tokens the old
    /// storage admitted. For tests and for removing fencelock from a database for good.
    pub async fn uninstall(&self) -> Result<()> {
        self.inner.sql.uninstall(&self.inner.pool).await
    }
}

/// The storage's value limit from the configured one (if any) and the server's
/// `max_allowed_packet`.
fn value_limit(configured: Option<usize>, max_allowed_packet: i64) -> Result<usize> {
    let carried = usize::try_from(max_allowed_packet)
        .unwrap_or(0)
        .saturating_sub(PACKET_OVERHEAD);
    match configured {
        Some(len) if len < MIN_VALUE_LEN => Err(Error::config(format!(
            "MySQL max_value_len {len} is below the minimum of {MIN_VALUE_LEN} bytes"
        ))),
        Some(len) if len > carried => Err(Error::config(format!(
            "MySQL max_value_len {len} does not fit the server's max_allowed_packet of \
             {max_allowed_packet} bytes (at most {carried}); raise max_allowed_packet or \
             lower max_value_len"
        ))),
        Some(len) => Ok(len),
        None if carried < MIN_VALUE_LEN => Err(Error::config(format!(
            "the server's max_allowed_packet of {max_allowed_packet} bytes is too small for \
             1 MiB values; raise it to at least {}",
            MIN_VALUE_LEN + PACKET_OVERHEAD
        ))),
        None => Ok(DEFAULT_MAX_VALUE_LEN.min(carried)),
    }
}

/// The options of both pools: at most `size` connections, a checkout waiting at most
/// `timeout`, autocommit on every new session, idle connections closed after
/// [`IDLE_TIMEOUT`], and a connection tested (a ping) on its way out of the pool only when it
/// sat idle for [`TESTED_AFTER_IDLE`] or longer. sqlx tests every connection on its way back
/// in, so testing it again on the way out would add a round trip to every operation; a
/// connection the server ended while it sat idle (a restart, `KILL`, `wait_timeout`) is found
/// by the test after a pause and replaced, and within the pause the statement fails as one in
/// flight at that moment would ([`Error::Unavailable`], retryable).
fn pool_options(size: u32, timeout: Duration) -> MySqlPoolOptions {
    MySqlPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(timeout)
        .idle_timeout(IDLE_TIMEOUT)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= TESTED_AFTER_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
        .after_connect(|conn, _| Box::pin(autocommit(conn)))
}

/// Turns autocommit on for one of fencelock's own sessions, whatever the server's default
/// (`--autocommit=0`) or an init command says. Every statement fencelock sends is meant to
/// commit by itself: with autocommit off, the creation of the token epoch's row at install
/// would stay in an open transaction, invisible to every other session (whose install then
/// waits on the row's lock) and rolled back when that session ends, while grants already
/// counted in the epoch it started; a storage write would likewise stay uncommitted.
async fn autocommit(conn: &mut sqlx::MySqlConnection) -> std::result::Result<(), sqlx::Error> {
    sqlx::Executor::execute(conn, "SET SESSION autocommit = 1")
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_value_limit_fits_the_packet() {
        const MIB: usize = 1 << 20;
        let packet = |mib: usize| i64::try_from(mib * MIB).unwrap();
        assert_eq!(
            value_limit(None, packet(64)).unwrap(),
            DEFAULT_MAX_VALUE_LEN
        );
        assert_eq!(
            value_limit(None, packet(2)).unwrap(),
            2 * MIB - PACKET_OVERHEAD
        );
        assert!(value_limit(None, packet(1)).is_err());
        assert_eq!(value_limit(Some(8 * MIB), packet(16)).unwrap(), 8 * MIB);
        let err = value_limit(Some(16 * MIB), packet(16)).unwrap_err();
        assert!(err.to_string().contains("max_allowed_packet"), "{err}");
        assert!(value_limit(Some(1000), packet(16)).is_err());
    }
}
