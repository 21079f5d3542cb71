//! `PgDatabase`: connecting, the schema, migrations, shared wake-ups.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, LockBackend, Result};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::OnceCell;
use tracing::Instrument;

use crate::config::validate_schema;
use crate::error::{map_sqlx_error, timed};
use crate::wakeups::Wakeups;
use crate::{PgAdvisoryBackend, PgBackendKind, PgConfig, PgLeaseBackend, PgStorage};

/// The migrations, embedded at compile time.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();

const BACKEND: &str = "postgres";

impl PgConfig {
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
                backend: self.backend,
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
    backend: PgBackendKind,
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
            .field("backend", &self.inner.backend)
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

    /// The lock backend the config chose ([`PgConfig::backend_kind`], `?backend=`).
    pub fn backend(&self) -> Arc<dyn LockBackend> {
        self.lock_backend(self.inner.backend)
    }

    /// The lock backend of `kind` on this database.
    pub fn lock_backend(&self, kind: PgBackendKind) -> Arc<dyn LockBackend> {
        match kind {
            PgBackendKind::Lease => Arc::new(self.lease_backend()),
            PgBackendKind::Advisory => Arc::new(self.advisory_backend()),
        }
    }

    /// The lock backend kind the config chose.
    pub fn backend_kind(&self) -> PgBackendKind {
        self.inner.backend
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
