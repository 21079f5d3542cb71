//! `PgDatabase`: connecting (or adopting the application's pool), the schema, migrations, shared wake-ups.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, LockBackend, Result};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool};
use tokio::sync::OnceCell;
use tracing::Instrument;

use crate::error::{map_sqlx_error, timed};
use crate::statements::{Statements, quote_ident};
use crate::wakeups::Wakeups;
use crate::{PgAdvisoryBackend, PgBackendKind, PgConfig, PgFence, PgLeaseBackend, PgStorage};

/// The migrations, embedded at compile time.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();

const BACKEND: &str = "postgres";

impl PgConfig {
    /// Checks the configuration, opens fencelock's own pool (connecting lazily), and, unless
    /// turned off with [`run_migrations`](Self::run_migrations), creates the schema and
    /// applies the migrations; otherwise checks that the server answers.
    ///
    /// Connections get no startup options from fencelock: every fencelock object is
    /// schema-qualified, so the connections work through a transaction-mode pooler and keep
    /// the server's (or the URL's) `search_path` for the caller's own SQL.
    pub async fn connect(self) -> Result<PgDatabase> {
        if self.pool_size == 0 || self.holder_pool_size == 0 {
            return Err(Error::config("pool sizes must be at least 1"));
        }
        if self.operation_timeout.is_zero() {
            return Err(Error::config("operation timeout must be greater than zero"));
        }
        let mut options = self.options.clone();
        if options.get_application_name().is_none() {
            options = options.application_name("fencelock");
        }
        let pool = PgPoolOptions::new()
            .max_connections(self.pool_size)
            .acquire_timeout(self.operation_timeout)
            .connect_lazy_with(options.clone());
        let db = PgDatabase::build(
            pool,
            options,
            &self.schema,
            Settings {
                backend: self.backend,
                timeout: self.operation_timeout,
                holder_pool_size: self.holder_pool_size,
                owns_pool: true,
            },
        )?;
        let span = tracing::debug_span!("fencelock.pg.connect", schema = %db.inner.schema);
        async {
            if self.migrate {
                db.migrate().await
            } else {
                timed(
                    BACKEND,
                    db.inner.timeout,
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

/// What [`PgDatabase::build`] needs besides the pool.
struct Settings {
    backend: PgBackendKind,
    timeout: Duration,
    holder_pool_size: u32,
    owns_pool: bool,
}

/// fencelock on one Postgres database: the schema of its tables, the pool it runs on, and the
/// factory of the lock backends, the storage and the fence for the application's own tables
/// ([`PgFence`]). Cheap to clone.
///
/// Made by [`PgConfig::connect`] (fencelock's own pool) or by [`PgDatabase::from_pool`] (the
/// application's pool, migrations run explicitly with [`migrate`](Self::migrate)).
#[derive(Clone)]
pub struct PgDatabase {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    holders: PgPool,
    options: PgConnectOptions,
    schema: String,
    sql: Statements,
    backend: PgBackendKind,
    channel: String,
    timeout: Duration,
    owns_pool: bool,
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
    /// Connects to `url` ([`PgConfig::from_url`]) with the default settings.
    pub async fn connect(url: &str) -> Result<Self> {
        PgConfig::from_url(url)?.connect().await
    }

    /// fencelock on the application's own pool, its tables in `schema` (see
    /// [`PgConfig::schema`] for valid names). Nothing is sent to the server: run
    /// [`migrate`](Self::migrate) once (at start-up, or let an operator apply the migrations)
    /// before using it. The lease backend, the storage, transactions and [`PgFence`] use
    /// `pool`; the advisory backend's held sessions and the release listener open their own
    /// connections with `pool`'s connect options. Default lock backend: lease; per-call
    /// time-out 5 s.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> fencelock_core::Result<()> {
    /// use fencelock_postgres::PgDatabase;
    /// let db = PgDatabase::from_pool(pool, "fencelock")?;
    /// db.migrate().await?;
    /// let fence = db.fence();
    /// # let _ = fence; Ok(()) }
    /// ```
    pub fn from_pool(pool: PgPool, schema: &str) -> Result<Self> {
        let options = (*pool.connect_options()).clone();
        let timeout = Duration::from_secs(5);
        Self::build(
            pool,
            options,
            schema,
            Settings {
                backend: PgBackendKind::default(),
                timeout,
                holder_pool_size: 64,
                owns_pool: false,
            },
        )
    }

    fn build(
        pool: PgPool,
        options: PgConnectOptions,
        schema: &str,
        settings: Settings,
    ) -> Result<Self> {
        let sql = Statements::new(schema)?;
        let holders = PgPoolOptions::new()
            .max_connections(settings.holder_pool_size)
            .acquire_timeout(settings.timeout)
            .connect_lazy_with(options.clone());
        Ok(PgDatabase {
            inner: Arc::new(Inner {
                pool,
                holders,
                options,
                channel: format!("fencelock_{schema}"),
                schema: schema.to_owned(),
                sql,
                backend: settings.backend,
                timeout: settings.timeout,
                owns_pool: settings.owns_pool,
                wakeups: OnceCell::new(),
            }),
        })
    }

    /// The schema that holds fencelock's tables.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// The pool fencelock runs its statements on (the application's, with
    /// [`from_pool`](Self::from_pool)). fencelock sets no session state on its connections.
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

    /// The fence for the application's own tables ([`PgFence`]), with the default rule.
    pub fn fence(&self) -> PgFence {
        PgFence::new(self)
    }

    /// Closes fencelock's pools: its own pool (not the application's, with
    /// [`from_pool`](Self::from_pool)) and the advisory holders' sessions, which frees their
    /// locks. Calls made afterwards fail with [`Error::Unavailable`].
    pub async fn close(&self) {
        self.inner.holders.close().await;
        if self.inner.owns_pool {
            self.inner.pool.close().await;
        }
    }

    pub(crate) fn holders(&self) -> &PgPool {
        &self.inner.holders
    }

    pub(crate) fn sql(&self) -> &Statements {
        &self.inner.sql
    }

    /// Creates the schema if missing and applies the embedded migrations (`migrations/*.sql`)
    /// to it, in one transaction, waiting for any other process migrating the same database.
    /// Safe to run on every start: applied migrations are skipped.
    ///
    /// The migrations name fencelock's tables unqualified, so the transaction sets
    /// `search_path` to the schema for itself only (`set_config(..., true)`); the connection
    /// goes back to the pool unchanged. A failed migration closes its connection.
    pub async fn migrate(&self) -> Result<()> {
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
            let create = format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(&inner.schema));
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
        let mut conn = timed(BACKEND, inner.timeout, inner.pool.acquire()).await?;
        // Migrations may wait for another process migrating the same database, so they get
        // a more generous bound than one call.
        let bound = inner.timeout.saturating_mul(6);
        let outcome = match tokio::time::timeout(bound, self.migrate_on(&mut conn)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(crate::error::timed_out(BACKEND, bound)),
        };
        if outcome.is_err() {
            // The migrator's session-level advisory lock may still be held: do not pool it.
            let _ = conn.close().await;
        }
        outcome
    }

    async fn migrate_on(&self, conn: &mut PgConnection) -> Result<()> {
        let mut tx = sqlx::Connection::begin(conn)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        // pg_temp last, so a temporary table can never stand in for one of fencelock's.
        let path = format!("{}, pg_temp", quote_ident(&self.inner.schema));
        sqlx::query("SELECT set_config('search_path', $1, true)")
            .bind(path)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        // The migrator's own lock is released before this transaction commits, so a second
        // process could apply the same migrations before the first one's tables are visible
        // (duplicate type names). A transaction-level lock per schema, held until commit,
        // makes the second migrator wait and then see what the first one committed. The
        // two-key form lives apart from the one-`bigint` ids of advisory locks.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('fencelock migrations'), hashtext($1))")
            .bind(&self.inner.schema)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        // `run_direct` on the connection itself: `run` goes through `Acquire`, whose
        // higher-ranked bound makes this future (and `connect`'s) not `Send`.
        MIGRATOR
            .run_direct(&mut *tx)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, sqlx::Error::Migrate(Box::new(e))))?;
        tx.commit().await.map_err(|e| map_sqlx_error(BACKEND, e))
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
