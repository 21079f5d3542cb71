//! `PgConfig` and `PgDatabase`: connecting, the schema, migrations, shared wake-ups.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, Result};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::OnceCell;
use tracing::Instrument;

use crate::error::{map_sqlx_error, timed};
use crate::wakeups::Wakeups;
use crate::{PgAdvisoryBackend, PgLeaseBackend, PgStorage};

/// The migrations, embedded at compile time.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();

/// The schema used when none is configured.
pub const DEFAULT_SCHEMA: &str = "fencelock";

/// The longest schema name accepted, so that the notification channel
/// `fencelock_<schema>` stays within Postgres' 63-byte identifier limit.
pub const MAX_SCHEMA_LEN: usize = 48;

const BACKEND: &str = "postgres";

/// How to reach Postgres and where fencelock keeps its tables.
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_postgres::PgConfig;
/// let db = PgConfig::from_url("postgres://postgres@127.0.0.1:5432/test")?
///     .schema("locks")
///     .operation_timeout(Duration::from_secs(2))
///     .connect()
///     .await?;
/// let backend = db.lease_backend();
/// # let _ = backend; Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgConfig {
    options: PgConnectOptions,
    schema: String,
    pool_size: u32,
    holder_pool_size: u32,
    operation_timeout: Duration,
    migrate: bool,
}

impl fmt::Debug for PgConfig {
    // Hand-written so that a password in the options never reaches a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConfig")
            .field("host", &self.options.get_host())
            .field("port", &self.options.get_port())
            .field("database", &self.options.get_database())
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("holder_pool_size", &self.holder_pool_size)
            .field("operation_timeout", &self.operation_timeout)
            .field("migrate", &self.migrate)
            .finish()
    }
}

impl PgConfig {
    /// A configuration from a `postgres://` / `postgresql://` URL (anything `sqlx` accepts).
    /// A malformed URL is [`Error::InvalidConfig`].
    pub fn from_url(url: &str) -> Result<Self> {
        let scheme = url
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("postgres" | "postgresql")) {
            return Err(Error::config(
                "invalid Postgres URL: expected postgres://user@host:port/database",
            ));
        }
        let options = PgConnectOptions::from_str(url).map_err(|e| Error::InvalidConfig {
            message: format!("invalid Postgres URL: {e}"),
            source: Some(Box::new(e)),
        })?;
        Ok(Self::from_options(options))
    }

    /// A configuration from ready-made connect options.
    pub fn from_options(options: PgConnectOptions) -> Self {
        PgConfig {
            options,
            schema: DEFAULT_SCHEMA.to_owned(),
            pool_size: 10,
            holder_pool_size: 64,
            operation_timeout: Duration::from_secs(5),
            migrate: true,
        }
    }

    /// The schema that holds fencelock's tables (default `fencelock`): lowercase ASCII letters,
    /// digits and `_`, not starting with a digit, at most [`MAX_SCHEMA_LEN`] bytes. It is
    /// created if missing, and set as the `search_path` of every connection fencelock opens.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Connections in the shared pool used by the lease table, the storage and transactions
    /// (default 10).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// Connections available to hold advisory locks (default 64): each lock held by
    /// [`PgAdvisoryBackend`] occupies one for the life of its lease.
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

    /// Whether [`connect`](Self::connect) creates the schema and applies the embedded
    /// migrations (default `true`). Turn it off when an operator applies them.
    pub fn run_migrations(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// Checks the configuration, connects, and (unless turned off) migrates the schema.
    pub async fn connect(self) -> Result<PgDatabase> {
        validate_schema(&self.schema)?;
        if self.pool_size == 0 || self.holder_pool_size == 0 {
            return Err(Error::config("pool sizes must be at least 1"));
        }
        if self.operation_timeout.is_zero() {
            return Err(Error::config("operation timeout must be greater than zero"));
        }
        let mut options = self
            .options
            .clone()
            .options([("search_path", self.schema.as_str())]);
        if options.get_application_name().is_none() {
            options = options.application_name("fencelock");
        }
        let timeout = self.operation_timeout;
        let pool = PgPoolOptions::new()
            .max_connections(self.pool_size)
            .acquire_timeout(timeout)
            .connect_lazy_with(options.clone());
        let holders = PgPoolOptions::new()
            .max_connections(self.holder_pool_size)
            .acquire_timeout(timeout)
            .connect_lazy_with(options.clone());
        let db = PgDatabase {
            inner: Arc::new(Inner {
                pool,
                holders,
                options,
                channel: format!("fencelock_{}", self.schema),
                schema: self.schema,
                timeout,
                wakeups: OnceCell::new(),
            }),
        };
        let span = tracing::debug_span!("fencelock.pg.connect", schema = %db.inner.schema);
        async {
            if self.migrate {
                db.migrate().await
            } else {
                timed(
                    BACKEND,
                    timeout,
                    sqlx::query("SELECT 1").execute(&db.inner.pool),
                )
                .await
                .map(drop)
            }
        }
        .instrument(span)
        .await?;
        Ok(db)
    }
}

/// Checks a schema name: `[a-z_][a-z0-9_]*`, at most [`MAX_SCHEMA_LEN`] bytes.
pub(crate) fn validate_schema(schema: &str) -> Result<()> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || schema.len() > MAX_SCHEMA_LEN {
        return Err(Error::config(format!(
            "invalid schema name {schema:?}: use lowercase ASCII letters, digits and `_`, \
             not starting with a digit, at most {MAX_SCHEMA_LEN} bytes"
        )));
    }
    Ok(())
}

/// A connection to Postgres with fencelock's schema in place: the factory of the backends and
/// the storage, which share its pools. Cheap to clone.
#[derive(Clone)]
pub struct PgDatabase {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    holders: PgPool,
    options: PgConnectOptions,
    schema: String,
    channel: String,
    timeout: Duration,
    wakeups: OnceCell<Wakeups>,
}

impl fmt::Debug for PgDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgDatabase")
            .field("host", &self.inner.options.get_host())
            .field("database", &self.inner.options.get_database())
            .field("schema", &self.inner.schema)
            .finish_non_exhaustive()
    }
}

impl PgDatabase {
    /// Connects to `url` with the default configuration (schema `fencelock`).
    pub async fn connect(url: &str) -> Result<Self> {
        PgConfig::from_url(url)?.connect().await
    }

    /// The schema that holds fencelock's tables.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// The shared pool. Its connections have fencelock's schema as `search_path`.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The per-call time-out.
    pub fn operation_timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// A [`PgLeaseBackend`] on this database.
    pub fn lease_backend(&self) -> PgLeaseBackend {
        PgLeaseBackend::new(self)
    }

    /// A [`PgAdvisoryBackend`] on this database.
    pub fn advisory_backend(&self) -> PgAdvisoryBackend {
        PgAdvisoryBackend::new(self)
    }

    /// A [`PgStorage`] on this database, with the default rule and value limit.
    pub fn storage(&self) -> PgStorage {
        PgStorage::new(self)
    }

    /// Closes the pools. Held advisory locks are freed as their connections close; calls made
    /// afterwards fail with [`Error::Unavailable`].
    pub async fn close(&self) {
        self.inner.holders.close().await;
        self.inner.pool.close().await;
    }

    pub(crate) fn holders(&self) -> &PgPool {
        &self.inner.holders
    }

    /// Creates the schema if missing and applies the embedded migrations to it.
    async fn migrate(&self) -> Result<()> {
        let inner = &self.inner;
        let exists: bool = timed(
            BACKEND,
            inner.timeout,
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(&inner.schema)
                .fetch_one(&inner.pool),
        )
        .await?;
        if !exists {
            // The name was validated to `[a-z_][a-z0-9_]*`, so it needs no quoting.
            let create = format!("CREATE SCHEMA IF NOT EXISTS {}", inner.schema);
            match tokio::time::timeout(inner.timeout, sqlx::query(&create).execute(&inner.pool))
                .await
            {
                Ok(Ok(_)) => {}
                // A concurrent CREATE SCHEMA of the same name won the race: fine.
                Ok(Err(e)) if crate::error::sqlstate(&e).as_deref() == Some("23505") => {}
                Ok(Err(e)) => return Err(map_sqlx_error(BACKEND, e)),
                Err(_) => return Err(crate::error::timed_out(BACKEND, inner.timeout)),
            }
        }
        // Migrations may wait for another process migrating the same database, so they get
        // a more generous bound than one call.
        let bound = inner.timeout.saturating_mul(6);
        match tokio::time::timeout(bound, MIGRATOR.run(&inner.pool)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(map_sqlx_error(BACKEND, sqlx::Error::Migrate(Box::new(e)))),
            Err(_) => Err(crate::error::timed_out(BACKEND, bound)),
        }
    }

    /// The release wake-ups, starting the shared listener on first use.
    pub(crate) async fn wakeups(&self, backend: &'static str) -> Result<&Wakeups> {
        let inner = &self.inner;
        inner
            .wakeups
            .get_or_try_init(|| {
                Wakeups::start(
                    backend,
                    inner.options.clone(),
                    &inner.channel,
                    inner.timeout,
                )
            })
            .await
    }
}
