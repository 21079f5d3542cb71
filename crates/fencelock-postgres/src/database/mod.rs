//! `PgDatabase`: connecting (or adopting the application's pool), the schema, migrations, shared wake-ups.
//!
//! By concern: the three pools ([`pools`]), checkouts that may open a connection
//! ([`checkout`]), the transaction-pooler detection ([`pooler`]),
//! the schema's lock mechanism ([`binding`]) and the migrations ([`migrate`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, LockBackend, LockKey, Result};
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::codec::micros;
use crate::error::timed;
use crate::exec::Arg;
use crate::exec::Protocol;
use crate::hash::advisory_lock_id_in;
use crate::statements::Statements;
use crate::wakeups::{KeepPlaces, Kept, KeptPlace, Wakeups};
use crate::{PgAdvisoryBackend, PgBackendKind, PgFence, PgLeaseBackend, PgPooler, PgStorage};

mod binding;
mod checkout;
mod migrate;
mod pooler;
mod pools;

pub(crate) use checkout::Explained;
pub(crate) use pools::tested_after_idle;

const BACKEND: &str = "postgres";

/// fencelock on one Postgres database: the schema of its tables, the pool it runs on, and the
/// factory of the lock backends, the storage and the fence for the application's own tables
/// ([`PgFence`]). Cheap to clone.
///
/// Made by [`PgConfig::connect`](crate::PgConfig::connect) (fencelock's own pool) or by [`PgDatabase::from_pool`] (the
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
    wakeups: OnceCell<Wakeups>,
    /// Checkouts that may open a connection, and the server's refusals as full.
    checkouts: Arc<checkout::Checkouts>,
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
    /// How long a transaction may sit idle before the server ends it
    /// ([`PgConfig::idle_in_transaction_timeout`](crate::PgConfig::idle_in_transaction_timeout); zero: never).
    pub fn idle_in_transaction_timeout(&self) -> Duration {
        self.inner.idle_in_transaction
    }

    /// The pooler setting this database was made with ([`PgPooler`]).
    pub fn pooler(&self) -> PgPooler {
        self.inner.pooler
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

    /// The size of the pool of holding sessions (the advisory backend's): each held lock keeps
    /// one.
    pub(crate) fn holder_pool_size(&self) -> u32 {
        self.inner.holders.options().get_max_connections()
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

    /// The lock backend the config chose ([`PgConfig::backend_kind`](crate::PgConfig::backend_kind), `?backend=`).
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

    pub(crate) fn sql(&self) -> &Statements {
        &self.inner.sql
    }

    /// One round of the place keeper on the statement pool: the lease backend's places
    /// (`lease_keep_places.sql`, one place ttl for all) and the advisory backend's
    /// (`advisory_keep_places.sql`, each waiter's own), one statement for each that has kept
    /// places; the waiters whose try has something to do.
    fn place_keeper(&self) -> KeepPlaces {
        let (pool, lease_sql, advisory_sql, timeout) = (
            self.inner.pool.clone(),
            self.inner.sql.lease_keep_places.clone(),
            self.inner.sql.advisory_keep_places.clone(),
            self.inner.timeout,
        );
        Arc::new(move |places: Vec<KeptPlace>| {
            let (pool, lease_sql, advisory_sql) =
                (pool.clone(), lease_sql.clone(), advisory_sql.clone());
            Box::pin(async move {
                let (lease, advisory): (Vec<&KeptPlace>, Vec<&KeptPlace>) =
                    places.iter().partition(|place| place.kept == Kept::Lease);
                let lease_ttl = micros(Kept::Lease.place_ttl());
                let advisory_ttls: Vec<f64> = advisory
                    .iter()
                    .map(|place| micros(place.kept.place_ttl()))
                    .collect();
                let mut woken = Vec::new();
                for (backend, sql, kept, ttls) in [
                    (
                        crate::lease_table::BACKEND,
                        &lease_sql,
                        &lease,
                        Arg::Float8(lease_ttl),
                    ),
                    (
                        crate::advisory::BACKEND,
                        &advisory_sql,
                        &advisory,
                        Arg::Float8Array(&advisory_ttls),
                    ),
                ] {
                    if kept.is_empty() {
                        continue;
                    }
                    let keys: Vec<&str> = kept.iter().map(|p| p.key.as_str()).collect();
                    let waiters: Vec<&str> = kept.iter().map(|p| p.waiter.as_str()).collect();
                    let args = [Arg::TextArray(&keys), Arg::TextArray(&waiters), ttls];
                    let rows: Vec<(String,)> = timed(
                        backend,
                        timeout,
                        sql.fetch_all(Protocol::Prepared, &pool, &args),
                    )
                    .await?;
                    woken.extend(rows.into_iter().map(|(waiter,)| waiter));
                }
                Ok(woken)
            })
        })
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
                    self.place_keeper(),
                )
            })
            .await
    }
}
