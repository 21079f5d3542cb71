//! `PgConfig`: the `postgres://` grammar, validation, and the typed settings of a connection.
//!
//! By concern: the URL grammar ([`grammar`], on the shared rules of [`fencelock_core::url`]:
//! redaction, options, decoding), the builder settings and their kinds ([`options`]),
//! connect-error and TLS classification ([`errors`]), schema names ([`schema`]).

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use url::Url;

mod errors;
mod grammar;
mod options;
mod schema;
#[cfg(test)]
mod tests;

pub(crate) use errors::explain_connect_failure;
pub use options::{PgBackendKind, PgPooler};
pub(crate) use schema::validate_schema;

/// The schema used when none is configured.
pub const DEFAULT_SCHEMA: &str = "fencelock";

/// The longest schema name accepted, so that the notification channel
/// `fencelock_<schema>` stays within Postgres' 63-byte identifier limit.
pub const MAX_SCHEMA_LEN: usize = 48;

/// How long a transaction of [`PgStorage::transaction`](crate::PgStorage::transaction) may sit
/// idle before the server ends it, unless configured ([`PgConfig::idle_in_transaction_timeout`]).
pub const DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// The port used when a URL names none.
pub const DEFAULT_PORT: u16 = 5432;

/// How to reach Postgres, which lock backend to use, and where fencelock keeps its tables.
///
/// The URL grammar (`from_url` / `to_url`):
///
/// ```text
/// postgres[ql]://[user[:password]@]host[:port][/database][?backend=lease|advisory][&schema=name][&pooler=detect|none|transaction][&idle_in_transaction_timeout=30s][&<driver options>]
/// ```
///
/// - `backend` chooses the lock backend ([`PgBackendKind`], default `lease`);
/// - `pooler` says whether the connections go through a transaction-mode pooler such as
///   PgBouncer ([`PgPooler`], default `detect`);
/// - `idle_in_transaction_timeout` bounds how long a transaction may sit idle
///   ([`idle_in_transaction_timeout`](Self::idle_in_transaction_timeout), default 30 s);
/// - `schema` names the schema of fencelock's tables (default `fencelock`; see
///   [`schema`](Self::schema) for the allowed names);
/// - driver options are passed to `sqlx` and kept as written: `sslmode`, `sslrootcert`,
///   `sslcert`, `sslkey` (and their dashed spellings), `statement-cache-capacity`,
///   `application_name`, `options`. Any other option is refused, and so are `host`, `port`,
///   `user`, `password` and `dbname` as options: they go in the URL itself.
///
/// `Display` and `Debug` show the URL with the password replaced by `***`; [`to_url`](Self::to_url)
/// gives it back whole, and `from_url(&config.to_url())` equals `config`.
///
/// ```
/// use fencelock_postgres::{PgBackendKind, PgConfig};
/// let config = PgConfig::from_url(
///     "postgres://app:secret@db.internal:5433/orders?backend=advisory&schema=locks&sslmode=require",
/// )?;
/// assert_eq!(config.backend_kind(), PgBackendKind::Advisory);
/// assert_eq!(config.schema_name(), "locks");
/// assert_eq!(
///     config.to_string(),
///     "postgres://app:***@db.internal:5433/orders?sslmode=require&backend=advisory&schema=locks",
/// );
/// assert_eq!(PgConfig::from_url(&config.to_url())?, config);
/// # Ok::<(), fencelock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct PgConfig {
    /// Scheme, credentials, host, port and database; no query.
    base: Url,
    /// The driver options, in URL order.
    driver: Vec<(String, String)>,
    /// Built from `base` and `driver` whenever either changes.
    pub(crate) options: PgConnectOptions,
    pub(crate) backend: PgBackendKind,
    pub(crate) schema: String,
    pub(crate) pooler: PgPooler,
    pub(crate) pool_size: u32,
    pub(crate) holder_pool_size: u32,
    pub(crate) operation_timeout: Duration,
    pub(crate) idle_in_transaction_timeout: Duration,
    pub(crate) migrate: bool,
}

impl PartialEq for PgConfig {
    /// Compares everything the config holds; the connect options are derived from the URL.
    fn eq(&self, other: &Self) -> bool {
        self.base == other.base
            && self.driver == other.driver
            && self.backend == other.backend
            && self.schema == other.schema
            && self.pooler == other.pooler
            && self.pool_size == other.pool_size
            && self.holder_pool_size == other.holder_pool_size
            && self.operation_timeout == other.operation_timeout
            && self.idle_in_transaction_timeout == other.idle_in_transaction_timeout
            && self.migrate == other.migrate
    }
}

impl Eq for PgConfig {}

fencelock_core::redacted_config!(PgConfig {
    pooler,
    pool_size,
    holder_pool_size,
    operation_timeout,
    idle_in_transaction_timeout,
    migrate
});
