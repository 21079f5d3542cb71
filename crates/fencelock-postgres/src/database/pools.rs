//! The three pools: fencelock's own (or the application's), the advisory holders' sessions,
//! and the transaction API's token connections; making, re-making and closing them.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, Result};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::pooler::{advisory_behind_pooler, known};
use super::{Inner, PgDatabase, checkout};
use crate::statements::Statements;
use crate::{PgBackendKind, PgConfig, PgPooler};

impl PgConfig {
    /// Checks the configuration, opens fencelock's own pool (connecting lazily), and, unless
    /// turned off with [`run_migrations`](Self::run_migrations), creates the schema and
    /// applies the migrations; otherwise checks that the server answers.
    ///
    /// Connections get no startup options from fencelock: every fencelock object is
    /// schema-qualified, so the connections work through a transaction-mode pooler and keep
    /// the server's (or the URL's) `search_path` for the caller's own SQL.
    ///
    /// With `?backend=advisory` behind a transaction-mode pooler (`?pooler=transaction`, or
    /// detected with the default `?pooler=detect`) this fails with [`Error::InvalidConfig`]:
    /// advisory locks live in a session, which such a pooler does not keep.
    pub async fn connect(self) -> Result<PgDatabase> {
        if self.pool_size == 0 || self.holder_pool_size == 0 {
            return Err(Error::config("pool sizes must be at least 1"));
        }
        if self.backend == PgBackendKind::Advisory && self.pooler == PgPooler::Transaction {
            return Err(advisory_behind_pooler(self.pooler));
        }
        if self.operation_timeout.is_zero() {
            return Err(Error::config("operation timeout must be greater than zero"));
        }
        if self.idle_in_transaction_timeout.as_millis() > i32::MAX as u128 {
            return Err(Error::config(
                "idle_in_transaction_timeout is longer than PostgreSQL accepts (about 24 days)",
            ));
        }
        crate::tls::ensure_crypto_provider();
        if self.password_exposed() {
            tracing::warn!(
                "the password for {self} crosses a connection whose server is not verified \
                 (sslmode={:?}): use sslmode=verify-full&sslrootcert=/path/ca.pem (DESIGN.md 8.1)",
                self.options.get_ssl_mode()
            );
        }
        let mut options = self.options.clone();
        if options.get_application_name().is_none() {
            options = options.application_name("fencelock");
        }
        let pool =
            pool_options(self.pool_size, self.operation_timeout).connect_lazy_with(options.clone());
        let db = PgDatabase::build(
            pool,
            options,
            &self.schema,
            Settings {
                backend: self.backend,
                timeout: self.operation_timeout,
                idle_in_transaction: self.idle_in_transaction_timeout,
                holder_pool_size: self.holder_pool_size,
                token_pool_size: self.pool_size,
                owns_pool: true,
                pooler: self.pooler,
            },
        )?;
        let span = tracing::debug_span!("fencelock.pg.connect", schema = %db.inner.schema);
        let connected = async {
            if self.migrate {
                db.migrate().await
            } else {
                // Answers that the server is there, and refuses a schema others can change.
                db.check_trust().await
            }
        }
        .instrument(span)
        .await;
        if let Err(e) = connected {
            let e = db.full_or(e).await;
            return Err(crate::config::explain_connect_failure(
                &self.hosts(),
                e,
                self.operation_timeout,
            )
            .await);
        }
        if db.inner.backend == PgBackendKind::Advisory {
            db.advisory_allowed().await?;
        }
        Ok(db)
    }
}

/// A pooled connection used again within this long is not tested first: see
/// [`tested_after_idle`].
const TESTED_AFTER_IDLE: Duration = Duration::from_millis(500);

/// The options of every pool fencelock opens: at most `size` connections, a checkout waiting
/// at most `timeout`, and the test of [`tested_after_idle`].
fn pool_options(size: u32, timeout: Duration) -> PgPoolOptions {
    tested_after_idle(
        PgPoolOptions::new()
            .max_connections(size)
            .acquire_timeout(timeout),
    )
}

/// `options` with a connection tested (a ping) on its way out of the pool only when it sat
/// idle for [`TESTED_AFTER_IDLE`] or longer. sqlx tests every connection on its way back in,
/// so testing it again on the way out would add a round trip to every statement (a lock grant
/// is one statement); a connection the server ended while it sat idle (a restart, a failover,
/// `pg_terminate_backend`) is then found by the test after a pause and replaced, and within
/// the pause the statement fails as one in flight at that moment would
/// ([`Error::Unavailable`], retryable). A failed test closes the connection and the pool hands
/// out another. The benchmarks' raw baseline pools the same way, so that its round trips are
/// the server's, not the pool's.
pub(crate) fn tested_after_idle(options: PgPoolOptions) -> PgPoolOptions {
    options
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= TESTED_AFTER_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

/// What [`PgDatabase::build`] needs besides the pool.
struct Settings {
    backend: PgBackendKind,
    timeout: Duration,
    idle_in_transaction: Duration,
    holder_pool_size: u32,
    token_pool_size: u32,
    owns_pool: bool,
    pooler: PgPooler,
}

impl PgDatabase {
    /// Connects to `url` ([`PgConfig::from_url`]) with the default settings.
    pub async fn connect(url: &str) -> Result<Self> {
        PgConfig::from_url(url)?.connect().await
    }

    /// fencelock on the application's own pool, its tables in `schema` (see
    /// [`PgConfig::schema`] for valid names). Nothing is sent to the server: run
    /// [`migrate`](Self::migrate) once (at start-up, or let an operator apply the migrations)
    /// before using it. The lease backend, the storage, transactions and [`PgFence`](crate::PgFence) use
    /// `pool`; the advisory backend's held sessions, the release listener and the transaction
    /// API's token statements (run outside the caller's transaction) open their own
    /// connections with `pool`'s connect options. Default lock backend: lease; per-call
    /// time-out 5 s; whether `pool` goes through a transaction-mode pooler is detected on
    /// first use ([`PgPooler::Detect`]; say it with [`with_pooler`](Self::with_pooler)).
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
        let token_pool_size = pool.options().get_max_connections();
        Self::build(
            pool,
            options,
            schema,
            Settings {
                backend: PgBackendKind::default(),
                timeout,
                idle_in_transaction: crate::config::DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT,
                holder_pool_size: 64,
                token_pool_size,
                owns_pool: false,
                pooler: PgPooler::default(),
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
        let checkouts = Arc::new(checkout::Checkouts::new(
            pool.options().get_max_connections(),
        ));
        let holders = pool_options(settings.holder_pool_size, settings.timeout)
            .connect_lazy_with(options.clone());
        let tokens = pool_options(settings.token_pool_size.max(1), settings.timeout)
            .connect_lazy_with(options.clone());
        Ok(PgDatabase {
            inner: Arc::new(Inner {
                pool,
                holders,
                tokens,
                options,
                channel: format!("fencelock_{schema}"),
                schema: schema.to_owned(),
                sql,
                backend: settings.backend,
                timeout: settings.timeout,
                idle_in_transaction: settings.idle_in_transaction,
                owns_pool: settings.owns_pool,
                closing: CancellationToken::new(),
                pooler: settings.pooler,
                protocol: known(settings.pooler),
                wakeups: OnceCell::new(),
                checkouts,
            }),
        })
    }

    /// The same database, its connections said to go (or not) through a transaction-mode
    /// pooler ([`PgPooler`]; the URL's `?pooler=`). For [`from_pool`](Self::from_pool), where
    /// there is no URL; call it before anything else uses the database.
    pub fn with_pooler(self, pooler: PgPooler) -> Self {
        self.rebuilt(pooler, self.inner.idle_in_transaction)
    }

    /// The same database, its transactions ([`PgStorage::transaction`](crate::PgStorage::transaction), and the
    /// application's after [`PgFence::admit`](crate::PgFence::admit)) ended by the server
    /// when idle in the transaction for longer than `timeout` (zero: never); see
    /// [`PgConfig::idle_in_transaction_timeout`]. For [`from_pool`](Self::from_pool), where
    /// there is no URL; call it before anything else uses the database.
    pub fn with_idle_in_transaction_timeout(self, timeout: Duration) -> Self {
        self.rebuilt(self.inner.pooler, timeout)
    }

    /// The same pools and schema with `pooler` and `idle_in_transaction` as given; what is
    /// learned on first use (the protocol, the wake-ups) is learned
    /// again.
    fn rebuilt(&self, pooler: PgPooler, idle_in_transaction: Duration) -> Self {
        let inner = &self.inner;
        PgDatabase {
            inner: Arc::new(Inner {
                pool: inner.pool.clone(),
                holders: inner.holders.clone(),
                tokens: inner.tokens.clone(),
                options: inner.options.clone(),
                schema: inner.schema.clone(),
                sql: inner.sql.clone(),
                backend: inner.backend,
                channel: inner.channel.clone(),
                timeout: inner.timeout,
                idle_in_transaction,
                owns_pool: inner.owns_pool,
                closing: inner.closing.clone(),
                pooler,
                protocol: known(pooler),
                wakeups: OnceCell::new(),
                checkouts: inner.checkouts.clone(),
            }),
        }
    }

    /// Closes fencelock's pools: its own pool (not the application's, with
    /// [`from_pool`](Self::from_pool)) and the advisory holders' sessions, which frees their
    /// locks: leases still held are closed (their guards' `lost()` fires), so this never waits
    /// for a holder to release; and the transaction API's token connections. Calls made
    /// afterwards fail with [`Error::Unavailable`].
    pub async fn close(&self) {
        self.inner.closing.cancel();
        self.inner.holders.close().await;
        self.inner.tokens.close().await;
        if self.inner.owns_pool {
            self.inner.pool.close().await;
        }
    }

    /// Cancelled once [`close`](Self::close) was called.
    pub(crate) fn closing(&self) -> CancellationToken {
        self.inner.closing.clone()
    }

    pub(crate) fn holders(&self) -> &PgPool {
        &self.inner.holders
    }

    /// The connections the transaction API takes its tokens on, outside the caller's
    /// transaction.
    pub(crate) fn tokens(&self) -> &PgPool {
        &self.inner.tokens
    }
}
