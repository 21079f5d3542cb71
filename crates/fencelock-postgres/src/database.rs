//! `PgDatabase`: connecting (or adopting the application's pool), the schema, migrations, shared wake-ups.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, LockBackend, LockKey, Result};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgConnection, PgPool};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{map_sqlx_error, timed};
use crate::exec::{Arg, Protocol, Sql};
use crate::hash::advisory_lock_id_in;
use crate::statements::{Statements, quote_ident};
use crate::wakeups::Wakeups;
use crate::{
    PgAdvisoryBackend, PgBackendKind, PgConfig, PgFence, PgLeaseBackend, PgPooler, PgStorage,
};

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
                idle_in_transaction: self.idle_in_transaction_timeout,
                holder_pool_size: self.holder_pool_size,
                token_pool_size: self.pool_size,
                owns_pool: true,
                pooler: self.pooler,
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
                    // Simple protocol: nothing is prepared, whatever is between here and the server.
                    db.inner.pool.execute(sqlx::raw_sql("SELECT 1")),
                )
                .await
                .map(drop)
            }
        }
        .instrument(span)
        .await
        .map_err(|e| crate::config::connect_failure(&self.hosts(), e))?;
        if db.inner.backend == PgBackendKind::Advisory {
            db.advisory_allowed().await?;
        }
        Ok(db)
    }
}

/// The protocol a pooler setting implies, unless it is left to detection.
fn known(pooler: PgPooler) -> OnceCell<Protocol> {
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
    /// The transaction API's tokens: one autocommit statement per checkout, never held across
    /// another wait, so transactions holding every connection of `pool` cannot starve it.
    tokens: PgPool,
    options: PgConnectOptions,
    schema: String,
    sql: Statements,
    backend: PgBackendKind,
    channel: String,
    timeout: Duration,
    idle_in_transaction: Duration,
    owns_pool: bool,
    /// Cancelled by [`PgDatabase::close`]: the session watches close their held sessions.
    closing: CancellationToken,
    pooler: PgPooler,
    /// The protocol fencelock's statements use, once known (see [`PgPooler`]).
    protocol: OnceCell<Protocol>,
    /// The schema's lock mechanism, once known (recorded by its first grant).
    mechanism: OnceCell<PgBackendKind>,
    wakeups: OnceCell<Wakeups>,
}

impl fmt::Debug for PgDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgDatabase")
            .field("host", &self.inner.options.get_host())
            .field("database", &self.inner.options.get_database())
            .field("schema", &self.inner.schema)
            .field("backend", &self.inner.backend)
            .field("pooler", &self.inner.pooler)
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
        let holders = PgPoolOptions::new()
            .max_connections(settings.holder_pool_size)
            .acquire_timeout(settings.timeout)
            .connect_lazy_with(options.clone());
        let tokens = PgPoolOptions::new()
            .max_connections(settings.token_pool_size.max(1))
            .acquire_timeout(settings.timeout)
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
                mechanism: OnceCell::new(),
                wakeups: OnceCell::new(),
            }),
        })
    }

    /// The same database, its connections said to go (or not) through a transaction-mode
    /// pooler ([`PgPooler`]; the URL's `?pooler=`). For [`from_pool`](Self::from_pool), where
    /// there is no URL; call it before anything else uses the database.
    pub fn with_pooler(self, pooler: PgPooler) -> Self {
        self.rebuilt(pooler, self.inner.idle_in_transaction)
    }

    /// The same database, its transactions ([`PgStorage::transaction`]) ended by the server
    /// when idle in the transaction for longer than `timeout` (zero: never); see
    /// [`PgConfig::idle_in_transaction_timeout`]. For [`from_pool`](Self::from_pool), where
    /// there is no URL; call it before anything else uses the database.
    pub fn with_idle_in_transaction_timeout(self, timeout: Duration) -> Self {
        self.rebuilt(self.inner.pooler, timeout)
    }

    /// The same pools and schema with `pooler` and `idle_in_transaction` as given; what is
    /// learned on first use (the protocol, the schema's mechanism, the wake-ups) is learned
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
                mechanism: OnceCell::new(),
                wakeups: OnceCell::new(),
            }),
        }
    }

    /// How long a transaction may sit idle before the server ends it
    /// ([`PgConfig::idle_in_transaction_timeout`]; zero: never).
    pub fn idle_in_transaction_timeout(&self) -> Duration {
        self.inner.idle_in_transaction
    }

    /// The pooler setting this database was made with ([`PgPooler`]).
    pub fn pooler(&self) -> PgPooler {
        self.inner.pooler
    }

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

    /// `Ok` if this schema serves `kind`'s grants: its recorded mechanism is `kind`, or none
    /// was recorded and `kind` is recorded now. Otherwise [`Error::InvalidConfig`] naming the
    /// schema and the mechanism it is bound to: holders of the lease backend and of the
    /// advisory backend do not see each other, so one schema serves one of them (DESIGN 5.3).
    pub(crate) async fn serves(&self, kind: PgBackendKind) -> Result<()> {
        let bound = *self
            .inner
            .mechanism
            .get_or_try_init(|| async {
                // Once per database: nothing to gain from preparing it (and a prepared
                // statement here would be one more name for a misconfigured pooler to clash
                // on). No row only when another process recorded one after this statement's
                // snapshot: the second time sees it.
                for _ in 0..2 {
                    let mechanism: Option<String> = timed(
                        BACKEND,
                        self.inner.timeout,
                        self.inner.sql.mechanism_bind.scalar_optional(
                            Protocol::Simple,
                            &self.inner.pool,
                            &[Arg::Text(kind.as_str())],
                        ),
                    )
                    .await?;
                    if let Some(mechanism) = mechanism {
                        return mechanism.parse::<PgBackendKind>();
                    }
                }
                Err(crate::error::protocol(
                    BACKEND,
                    "the schema's lock mechanism could not be read",
                ))
            })
            .await?;
        self.check_mechanism(bound, kind)
    }

    /// The mechanism this schema is bound to, if this process already knows it.
    pub(crate) fn known_mechanism(&self) -> Option<PgBackendKind> {
        self.inner.mechanism.get().copied()
    }

    /// Records what a statement found the schema bound to.
    pub(crate) fn learned_mechanism(&self, bound: PgBackendKind) {
        let _ = self.inner.mechanism.set(bound);
    }

    fn check_mechanism(&self, bound: PgBackendKind, kind: PgBackendKind) -> Result<()> {
        if bound == kind {
            return Ok(());
        }
        let schema = &self.inner.schema;
        Err(Error::config(format!(
            "schema {schema:?} is bound to the {bound} lock mechanism (recorded in \
             {schema}.fencelock_mechanism by its first grant), so the {kind} backend refuses \
             to grant there: holders of the two would not exclude each other. Use \
             backend={bound} or another schema (to switch this one, delete that row while no \
             lock is held)"
        )))
    }

    /// `Ok` unless the connections go through a transaction-mode pooler, where the advisory
    /// backend cannot hold a lock.
    pub(crate) async fn advisory_allowed(&self) -> Result<()> {
        if self.protocol().await? == Protocol::Simple {
            return Err(advisory_behind_pooler(self.inner.pooler));
        }
        Ok(())
    }

    /// The schema that holds fencelock's tables.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// The advisory-lock id of `key` for this installation ([`advisory_lock_id_in`] with this
    /// database's schema): what [`PgAdvisoryBackend`] and transactions lock. Raw `#<i64>` keys
    /// are their id in every schema; other keys are hashed with the schema, so installations
    /// in different schemas of one database never contend.
    pub fn advisory_lock_id(&self, key: &LockKey) -> i64 {
        advisory_lock_id_in(&self.inner.schema, key)
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
        let protocol = self.protocol().await?;
        let exists: bool =
            timed(
                BACKEND,
                inner.timeout,
                Sql::new("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                    .scalar_one(protocol, &inner.pool, &[Arg::Text(&inner.schema)]),
            )
            .await?;
        if !exists {
            let create = Sql::new(&format!(
                "CREATE SCHEMA IF NOT EXISTS {}",
                quote_ident(&inner.schema)
            ));
            match tokio::time::timeout(inner.timeout, create.execute(protocol, &inner.pool, &[]))
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
        let outcome = match tokio::time::timeout(bound, self.migrate_on(&mut conn, protocol)).await
        {
            Ok(outcome) => outcome,
            Err(_) => Err(crate::error::timed_out(BACKEND, bound)),
        };
        if outcome.is_err() || protocol == Protocol::Simple {
            // After a failure the migrator's session-level advisory lock may still be held:
            // do not pool the connection. Behind a transaction pooler, its cache names
            // statements that were deallocated before the commit: do not pool it either.
            let _ = conn.close().await;
        }
        outcome
    }

    async fn migrate_on(&self, conn: &mut PgConnection, protocol: Protocol) -> Result<()> {
        let mut tx = sqlx::Connection::begin(conn)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        // pg_temp last, so a temporary table can never stand in for one of fencelock's.
        let path = format!("{}, pg_temp", quote_ident(&self.inner.schema));
        Sql::new("SELECT set_config('search_path', $1, true)")
            .execute(protocol, &mut *tx, &[Arg::Text(&path)])
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        // The migrator's own lock is released before this transaction commits, so a second
        // process could apply the same migrations before the first one's tables are visible
        // (duplicate type names). A transaction-level lock per schema, held until commit,
        // makes the second migrator wait and then see what the first one committed. The
        // two-key form lives apart from the one-`bigint` ids of advisory locks.
        Sql::new("SELECT pg_advisory_xact_lock(hashtext('fencelock migrations'), hashtext($1))")
            .execute(protocol, &mut *tx, &[Arg::Text(&self.inner.schema)])
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        // `run_direct` on the connection itself: `run` goes through `Acquire`, whose
        // higher-ranked bound makes this future (and `connect`'s) not `Send`.
        MIGRATOR
            .run_direct(&mut *tx)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, sqlx::Error::Migrate(Box::new(e))))?;
        if protocol == Protocol::Simple {
            // The migrator prepares named statements. Behind a transaction pooler they would
            // stay on this server connection after the commit, where another client's
            // statement of the same name would collide with them: drop them while the
            // transaction still holds the connection.
            (&mut *tx)
                .execute(sqlx::raw_sql("DEALLOCATE ALL"))
                .await
                .map_err(|e| map_sqlx_error(BACKEND, e))?;
        }
        tx.commit().await.map_err(|e| map_sqlx_error(BACKEND, e))
    }

    /// The release wake-ups, starting the shared listener on first use.
    pub(crate) async fn wakeups(&self, backend: &'static str) -> Result<&Wakeups> {
        let inner = &self.inner;
        if self.protocol().await? == Protocol::Simple {
            // A LISTEN lives in a session: a transaction pooler gives the server connection
            // to other clients as soon as it is done, and the notifications go nowhere.
            return Err(Error::Unavailable {
                backend,
                message: "no release notifications through a transaction-mode pooler".into(),
                source: None,
            });
        }
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
