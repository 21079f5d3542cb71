//! The settings of a [`PgConfig`] beyond its URL, and the kinds its options choose.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use fencelock_core::{Error, Result};
use sqlx::postgres::{PgConnectOptions, PgSslMode};

use super::PgConfig;

/// The lock backend a [`PgConfig`] chooses with `?backend=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PgBackendKind {
    /// `lease` (default): [`PgLeaseBackend`](crate::PgLeaseBackend), the lease table.
    #[default]
    Lease,
    /// `advisory`: [`PgAdvisoryBackend`](crate::PgAdvisoryBackend), session advisory locks.
    Advisory,
}

impl PgBackendKind {
    /// Every kind, in the order the docs list them.
    pub const ALL: &'static [PgBackendKind] = &[PgBackendKind::Lease, PgBackendKind::Advisory];

    /// The name used in `?backend=`.
    pub fn as_str(self) -> &'static str {
        match self {
            PgBackendKind::Lease => "lease",
            PgBackendKind::Advisory => "advisory",
        }
    }
}

/// Whether connections go through a transaction-mode pooler (`?pooler=`), which decides how
/// fencelock sends its statements and whether the advisory backend can work at all.
///
/// Behind PgBouncer in transaction mode (before 1.21, or without `max_prepared_statements`)
/// named prepared statements do not survive from one transaction to the next, and a session
/// is only one's own for the length of a transaction. With [`Transaction`](Self::Transaction)
/// every fencelock statement is sent as one simple-protocol message (its parameters written
/// into the text as inert hex and number literals), which runs whole on one server connection;
/// release wake-ups poll instead of `LISTEN`ing; and the advisory backend refuses to work,
/// since it holds each lock in a session. On a direct connection prepared statements are
/// kept: they are the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PgPooler {
    /// `detect` (default): find out on first use. Two fresh connections each ask the server
    /// for their session's process id; on a direct connection two open sessions never share
    /// one, so the same id twice proves a transaction pooler. Different ids do not prove its
    /// absence (a busy pooler may hand out two server connections): say what you have.
    #[default]
    Detect,
    /// `none`: a direct connection (or a session-mode pooler); named prepared statements.
    None,
    /// `transaction`: a transaction-mode pooler such as PgBouncer `pool_mode = transaction`.
    Transaction,
}

impl PgPooler {
    /// Every setting, in the order the docs list them.
    pub const ALL: &'static [PgPooler] = &[PgPooler::Detect, PgPooler::None, PgPooler::Transaction];

    /// The name used in `?pooler=`.
    pub fn as_str(self) -> &'static str {
        match self {
            PgPooler::Detect => "detect",
            PgPooler::None => "none",
            PgPooler::Transaction => "transaction",
        }
    }
}

impl fmt::Display for PgPooler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PgPooler {
    type Err = Error;

    /// `detect`, `none` or `transaction`; anything else is [`Error::InvalidConfig`].
    fn from_str(s: &str) -> Result<Self> {
        PgPooler::ALL
            .iter()
            .copied()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| {
                Error::config(format!(
                    "unknown pooler mode {s:?}: use `detect`, `none` or `transaction`"
                ))
            })
    }
}

impl fmt::Display for PgBackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PgBackendKind {
    type Err = Error;

    /// `lease` or `advisory`; anything else is [`Error::InvalidConfig`].
    fn from_str(s: &str) -> Result<Self> {
        PgBackendKind::ALL
            .iter()
            .copied()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| {
                Error::config(format!(
                    "unknown Postgres backend {s:?}: use `lease` or `advisory`"
                ))
            })
    }
}

impl PgConfig {
    /// Uses `kind` as the lock backend (the URL's `?backend=`).
    pub fn with_backend_kind(mut self, kind: PgBackendKind) -> Self {
        self.backend = kind;
        self
    }

    /// Says whether the connections go through a transaction-mode pooler (the URL's
    /// `?pooler=`; see [`PgPooler`]).
    pub fn with_pooler(mut self, pooler: PgPooler) -> Self {
        self.pooler = pooler;
        self
    }

    /// The pooler setting (`?pooler=`, default [`PgPooler::Detect`]).
    pub fn pooler(&self) -> PgPooler {
        self.pooler
    }

    /// The lock backend this config chooses (`?backend=`, default [`PgBackendKind::Lease`]).
    pub fn backend_kind(&self) -> PgBackendKind {
        self.backend
    }

    /// The schema that holds fencelock's tables (default `fencelock`): lowercase ASCII letters,
    /// digits and `_`, not starting with a digit, at most [`MAX_SCHEMA_LEN`](crate::MAX_SCHEMA_LEN) bytes (checked by
    /// [`connect`](Self::connect); `from_url` checks `?schema=` at once). It is created if
    /// missing.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The configured schema name.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    /// Names fencelock's sessions `name` in `pg_stat_activity` (the driver option
    /// `application_name`, default `fencelock`), replacing any name the URL gave.
    pub fn application_name(mut self, name: &str) -> Self {
        self.driver.retain(|(k, _)| k != "application_name");
        self.driver
            .push(("application_name".to_owned(), name.to_owned()));
        self.options = self.options.application_name(name);
        self
    }

    /// Connections in the shared pool used by the lease table, the storage and transactions
    /// (default 10).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// Connections available to hold advisory locks (default 64): each lock held by
    /// [`PgAdvisoryBackend`](crate::PgAdvisoryBackend) occupies one for the life of its lease.
    pub fn holder_pool_size(mut self, size: u32) -> Self {
        self.holder_pool_size = size;
        self
    }

    /// The longest any single database call may take, connecting included (default 5 s).
    /// Past it the call fails with [`Error::Unavailable`].
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// How long a transaction of [`PgStorage::transaction`](crate::PgStorage::transaction), or
    /// an application's transaction after [`PgFence::admit`](crate::PgFence::admit), may
    /// sit idle (the client sending nothing: paused, stuck, waiting on something else) before
    /// the server ends its session, rolling it back and freeing its lock (default
    /// [`DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT`](crate::DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT), 30 s; zero: never). In the URL:
    /// `?idle_in_transaction_timeout=30s` (a whole number of `ms`, `s` or `min`). Set as
    /// `idle_in_transaction_session_timeout` for that transaction only; TCP keepalives cannot
    /// do this, since a paused process's kernel still answers them. Whole milliseconds.
    pub fn idle_in_transaction_timeout(mut self, timeout: Duration) -> Self {
        self.idle_in_transaction_timeout = timeout;
        self
    }

    /// Whether [`connect`](Self::connect) creates the schema and applies the embedded
    /// migrations (default `true`). Turn it off when an operator applies them.
    pub fn run_migrations(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// The connect options the driver gets.
    pub fn connect_options(&self) -> &PgConnectOptions {
        crate::tls::ensure_crypto_provider();
        &self.options
    }

    /// Whether the URL's password would cross to a server off this machine over a connection
    /// that does not verify the server (plain, `prefer` or `require` without a root
    /// certificate): what [`connect`](Self::connect) warns about.
    pub(crate) fn password_exposed(&self) -> bool {
        let checked = matches!(
            self.options.get_ssl_mode(),
            PgSslMode::VerifyCa | PgSslMode::VerifyFull
        );
        let host = match self.options.get_socket() {
            Some(_) => "/",
            None => self.options.get_host(),
        };
        fencelock_core::password_exposed(self.base.password().is_some(), host, checked)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_password_to_an_unverified_remote_server_is_flagged() {
        let flagged = |url: &str| PgConfig::from_url(url).unwrap().password_exposed();
        assert!(flagged("postgres://app:pw@db.example/orders"));
        assert!(flagged(
            "postgres://app:pw@db.example/orders?sslmode=require"
        ));
        assert!(!flagged("postgres://app:pw@127.0.0.1/orders"));
        assert!(!flagged("postgres://app@db.example/orders"));
        assert!(!flagged(
            "postgres://app:pw@db.example/orders?sslmode=verify-full&sslrootcert=/etc/hostname"
        ));
    }
}
