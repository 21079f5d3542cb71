//! The PostgreSQL backends next to what a user would otherwise write, in one criterion group so
//! the ratios come out of one run:
//!
//! - acquire + release: `PgLeaseBackend` and `PgAdvisoryBackend` vs raw sqlx
//!   `pg_try_advisory_lock` + `pg_advisory_unlock` on a pooled connection, and vs sqlx's own
//!   `PgAdvisoryLock`;
//! - a fenced write on `PgStorage` vs a raw `UPDATE`.
//!
//! Runs against `FENCELOCK_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`) in a
//! throwaway schema.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use fencelock::postgres::{PgConfig, PgDatabase};
use fencelock::{FencedStorage, LockBackend, LockKey};
use fencelock_testkit::postgres::{PgSchema, pg_options};
use sqlx::Either;
use sqlx::postgres::PgAdvisoryLock;

const TTL: Duration = Duration::from_secs(30);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a Tokio runtime: {e}"))
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    panic!("{what}: {e}")
}

/// One acquire + release per iteration through a fencelock backend.
macro_rules! bench_backend {
    ($group:expr, $rt:expr, $name:expr, $backend:expr, $key:expr) => {{
        let backend = $backend;
        let key = LockKey::new($key).unwrap_or_else(|e| fail("key", e));
        $group.bench_function($name, |b| {
            b.to_async(&$rt).iter(|| async {
                let lease = backend
                    .try_acquire(&key, TTL)
                    .await
                    .unwrap_or_else(|e| fail("acquire", e))
                    .unwrap_or_else(|| fail("acquire", "not granted"));
                black_box(
                    backend
                        .release(&lease)
                        .await
                        .unwrap_or_else(|e| fail("release", e)),
                );
            })
        });
    }};
}

fn postgres(c: &mut Criterion) {
    let rt = runtime();
    let schema = rt.block_on(PgSchema::create());
    let db: PgDatabase = rt
        .block_on(
            PgConfig::from_options(pg_options())
                .schema(schema.name())
                .connect(),
        )
        .unwrap_or_else(|e| fail("connect", e));
    let pool = db.pool().clone();
    let raw_id = schema.unique_id();
    let mut group = c.benchmark_group("postgres");

    group.bench_function(
        "acquire+release: raw sqlx pg_try_advisory_lock + unlock",
        |b| {
            b.to_async(&rt).iter(|| async {
                let mut conn = pool.acquire().await.unwrap_or_else(|e| fail("pool", e));
                let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(raw_id)
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap_or_else(|e| fail("lock", e));
                assert!(got);
                let released: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
                    .bind(raw_id)
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap_or_else(|e| fail("unlock", e));
                black_box(released);
            })
        },
    );

    let sqlx_lock = PgAdvisoryLock::new(format!("bench/{}", schema.name()));
    group.bench_function("acquire+release: sqlx PgAdvisoryLock", |b| {
        b.to_async(&rt).iter(|| async {
            let conn = pool.acquire().await.unwrap_or_else(|e| fail("pool", e));
            match sqlx_lock
                .try_acquire(conn)
                .await
                .unwrap_or_else(|e| fail("lock", e))
            {
                Either::Left(guard) => {
                    black_box(
                        guard
                            .release_now()
                            .await
                            .unwrap_or_else(|e| fail("unlock", e)),
                    );
                }
                Either::Right(_) => fail("lock", "not granted"),
            }
        })
    });

    bench_backend!(
        group,
        rt,
        "acquire+release: fencelock PgLeaseBackend",
        db.lease_backend(),
        "bench/lease"
    );
    bench_backend!(
        group,
        rt,
        "acquire+release: fencelock PgAdvisoryBackend",
        db.advisory_backend(),
        "bench/advisory"
    );

    // Writes of 64 bytes.
    let value = vec![7u8; 64];
    rt.block_on(async {
        sqlx::query("CREATE TABLE bench_plain (id bigint PRIMARY KEY, value bytea)")
            .execute(&pool)
            .await?;
        sqlx::query("INSERT INTO bench_plain VALUES (1, NULL)")
            .execute(&pool)
            .await
    })
    .unwrap_or_else(|e| fail("bench table", e));
    group.bench_function("write: raw UPDATE", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(
                sqlx::query("UPDATE bench_plain SET value = $2 WHERE id = $1")
                    .bind(1_i64)
                    .bind(&value[..])
                    .execute(&pool)
                    .await
                    .unwrap_or_else(|e| fail("update", e)),
            );
        })
    });

    let storage = db.storage();
    let resource = LockKey::new("bench/fenced-write").unwrap_or_else(|e| fail("key", e));
    let backend = db.lease_backend();
    let lease = rt
        .block_on(backend.try_acquire(&resource, Duration::from_secs(3600)))
        .unwrap_or_else(|e| fail("acquire", e))
        .unwrap_or_else(|| fail("acquire", "not granted"));
    let fence = lease.fence();
    group.bench_function("write: fencelock PgStorage fenced write", |b| {
        b.to_async(&rt).iter(|| async {
            storage
                .write(&resource, fence, &value)
                .await
                .unwrap_or_else(|e| fail("fenced write", e));
        })
    });
    group.finish();

    rt.block_on(async {
        db.close().await;
        schema.cleanup().await;
    });
}

criterion_group!(benches, postgres);
criterion_main!(benches);
