//! What fencing the application's own tables costs: `fencelock_admit` and the row guard next to
//! the same `UPDATE` without them, in one run, on `FENCELOCK_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`) in a throwaway schema.
//!
//! Two shapes, so the ratio can be read both ways:
//! - `transaction`: `BEGIN; <statements>; COMMIT` per iteration, commit (WAL flush) included,
//!   what an application pays per fenced unit of work;
//! - `statement`: the statements alone, inside one open transaction per sample (rolled back),
//!   which isolates the fence's own cost.
//!
//! Subjects: `update` (the baseline, `UPDATE accounts SET balance = balance + 1`),
//! `update_with_fence_columns` (the same `UPDATE` also setting the fence columns, on an
//! unguarded table), `row_guard` (that `UPDATE` on a guarded table), `admit_same_fence` and
//! `admit_new_token` (`fencelock_admit` before the baseline `UPDATE`, presenting the same fence
//! each time, or a newer token each time so the fence record is written).
//!
//! After the criterion groups the same subjects run once more interleaved (rotating order,
//! medians), which keeps the ratios honest on a machine whose load changes during the run.
//!
//! ```text
//! cargo bench --bench postgres_fence --features postgres
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use fencelock::postgres::sqlx::postgres::PgPoolOptions;
use fencelock::postgres::sqlx::{self, PgConnection, PgPool};
use fencelock::postgres::{FenceParams, PgDatabase, PgFence};
use fencelock::{Fence, FencingToken, LockKey, OwnerId};
use fencelock_testkit::postgres::{PgSchema, pg_options};
use tokio::runtime::Runtime;

/// The statements of one iteration, given the next token.
#[derive(Debug, Clone, Copy)]
enum Subject {
    Update,
    UpdateWithFenceColumns,
    RowGuard,
    AdmitSameFence,
    AdmitNewToken,
}

const SUBJECTS: [(&str, Subject); 5] = [
    ("update", Subject::Update),
    ("update_with_fence_columns", Subject::UpdateWithFenceColumns),
    ("row_guard", Subject::RowGuard),
    ("admit_same_fence", Subject::AdmitSameFence),
    ("admit_new_token", Subject::AdmitNewToken),
];

struct Bench {
    pool: PgPool,
    fence: PgFence,
    schema: PgSchema,
    key: LockKey,
    owner: OwnerId,
    /// The token `admit_same_fence` presents: the record's current one.
    same_token: AtomicU64,
    next_token: AtomicU64,
}

impl Bench {
    async fn setup() -> Self {
        let schema = PgSchema::create().await;
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(pg_options())
            .await
            .unwrap();
        let db = PgDatabase::from_pool(pool.clone(), schema.name()).unwrap();
        db.migrate().await.unwrap();
        let s = schema.name();
        for table in ["plain", "guarded"] {
            sqlx::query(&format!(
                "CREATE TABLE {s}.{table} (id bigint PRIMARY KEY, balance bigint NOT NULL, \
                 fence_token bigint, fence_owner bytea)"
            ))
            .execute(&pool)
            .await
            .unwrap();
            sqlx::query(&format!(
                "INSERT INTO {s}.{table} (id, balance) VALUES (1, 0)"
            ))
            .execute(&pool)
            .await
            .unwrap();
        }
        let fence = db.fence();
        fence
            .guard_table(&pool, &format!("{s}.guarded"))
            .await
            .unwrap();
        Bench {
            pool,
            fence,
            schema,
            key: LockKey::new("bench/account/1").unwrap(),
            owner: OwnerId::random(),
            same_token: AtomicU64::new(1),
            next_token: AtomicU64::new(1),
        }
    }

    fn fence_of(&self, token: u64) -> Fence {
        Fence::new(FencingToken::new(token).unwrap(), self.owner)
    }

    fn new_fence(&self) -> Fence {
        self.fence_of(self.next_token.fetch_add(1, Ordering::Relaxed))
    }

    /// Admits and commits a newer fence, which `admit_same_fence` then presents.
    async fn reset_same_fence(&self) {
        let fence = self.new_fence();
        let mut conn = self.pool.acquire().await.unwrap();
        self.fence
            .admit(&mut *conn, &self.key, fence)
            .await
            .unwrap();
        self.same_token.store(fence.token.get(), Ordering::Relaxed);
    }

    /// Runs one iteration; returns the token a committed `admit_new_token` leaves on the
    /// fence record.
    async fn run(&self, conn: &mut PgConnection, subject: Subject) -> Option<u64> {
        let s = self.schema.name();
        match subject {
            Subject::Update => {
                sqlx::query(&format!(
                    "UPDATE {s}.plain SET balance = balance + 1 WHERE id = 1"
                ))
                .execute(&mut *conn)
                .await
                .unwrap();
            }
            Subject::UpdateWithFenceColumns | Subject::RowGuard => {
                let table = match subject {
                    Subject::RowGuard => "guarded",
                    _ => "plain",
                };
                let p = FenceParams::try_from(self.new_fence()).unwrap();
                sqlx::query(&format!(
                    "UPDATE {s}.{table} SET balance = balance + 1, fence_token = $1, \
                     fence_owner = $2 WHERE id = 1"
                ))
                .bind(p.token)
                .bind(p.owner)
                .execute(&mut *conn)
                .await
                .unwrap();
            }
            Subject::AdmitSameFence | Subject::AdmitNewToken => {
                let fence = match subject {
                    Subject::AdmitSameFence => {
                        self.fence_of(self.same_token.load(Ordering::Relaxed))
                    }
                    _ => self.new_fence(),
                };
                self.fence
                    .admit(&mut *conn, &self.key, fence)
                    .await
                    .unwrap();
                sqlx::query(&format!(
                    "UPDATE {s}.plain SET balance = balance + 1 WHERE id = 1"
                ))
                .execute(&mut *conn)
                .await
                .unwrap();
                return Some(fence.token.get());
            }
        }
        None
    }

    /// `iters` transactions, each committed.
    async fn transactions(&self, subject: Subject, iters: u64) -> Duration {
        let mut conn = self.pool.acquire().await.unwrap();
        let started = Instant::now();
        for _ in 0..iters {
            let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
            let recorded = self.run(&mut tx, subject).await;
            tx.commit().await.unwrap();
            // The record now holds this token: `admit_same_fence` presents it from now on.
            if let Some(token) = recorded {
                self.same_token.fetch_max(token, Ordering::Relaxed);
            }
        }
        started.elapsed()
    }

    /// `iters` iterations inside one transaction, rolled back afterwards.
    async fn statements(&self, subject: Subject, iters: u64) -> Duration {
        let mut conn = self.pool.acquire().await.unwrap();
        let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
        let started = Instant::now();
        for _ in 0..iters {
            self.run(&mut tx, subject).await;
        }
        let elapsed = started.elapsed();
        tx.rollback().await.unwrap();
        elapsed
    }
}

fn postgres_fence(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    let bench = runtime.block_on(Bench::setup());
    for (shape, transactions) in [("transaction", true), ("statement", false)] {
        runtime.block_on(bench.reset_same_fence());
        let mut group = c.benchmark_group(format!("postgres_fence/{shape}"));
        group
            .sample_size(30)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(4));
        for (name, subject) in SUBJECTS {
            let bench = &bench;
            group.bench_function(name, |b| {
                b.to_async(&runtime).iter_custom(|iters| async move {
                    if transactions {
                        bench.transactions(subject, iters).await
                    } else {
                        bench.statements(subject, iters).await
                    }
                });
            });
        }
        group.finish();
    }
    runtime.block_on(async {
        bench.pool.close().await;
    });
    drop(bench);
}

/// The same subjects measured interleaved, round after round in rotating order, so a machine
/// whose load drifts during the run slows every subject alike; prints the median time per
/// iteration and its ratio to `update`.
#[allow(clippy::print_stdout)]
fn interleaved(rounds: usize) {
    let runtime = Runtime::new().unwrap();
    runtime.block_on(async {
        let bench = Bench::setup().await;
        for (shape, batch) in [("transaction", 10_u64), ("statement", 20)] {
            bench.reset_same_fence().await;
            let mut samples: Vec<Vec<f64>> = vec![Vec::new(); SUBJECTS.len()];
            for round in 0..rounds {
                for i in 0..SUBJECTS.len() {
                    let at = (i + round) % SUBJECTS.len();
                    let subject = SUBJECTS[at].1;
                    let took = if shape == "transaction" {
                        bench.transactions(subject, batch).await
                    } else {
                        bench.statements(subject, batch).await
                    };
                    samples[at].push(took.as_secs_f64() * 1e6 / batch as f64);
                }
            }
            let medians: Vec<f64> = samples
                .iter_mut()
                .map(|s| {
                    s.sort_by(f64::total_cmp);
                    s[s.len() / 2]
                })
                .collect();
            println!("postgres_fence/{shape}, interleaved, {rounds} rounds of {batch}:");
            for ((name, _), median) in SUBJECTS.iter().zip(&medians) {
                println!(
                    "  {name:<26} {median:>9.1} us   x{:.2}",
                    median / medians[0]
                );
            }
        }
        bench.pool.close().await;
    });
}

criterion_group!(benches, postgres_fence);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    interleaved(100);
}
