//! fencelock through PgBouncer (transaction mode) next to the same raw statements through the
//! same PgBouncer, and the cost of the pooler-safe statements on a direct connection.
//!
//! ```text
//! cargo bench --features postgres --bench pgbouncer [-- <seconds per case> <tasks>]
//! ```
//!
//! Starts its own PgBouncer (the testkit's: transaction mode, `default_pool_size = 10`, in
//! front of `FENCELOCK_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`) and a
//! throwaway schema. Each case runs `tasks` tasks (default 16) for the given time (default
//! 3 s), each task on keys of its own, and prints operations per second and latency
//! percentiles. The raw baseline is what an application writes without fencelock, in the form
//! that is correct through such a pooler (simple-protocol statements); on the direct
//! connection it is sqlx's usual cached prepared statement.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::postgres::{PgConfig, PgDatabase};
use fencelock::{Fence, FencedStorage, FencingToken, LockBackend, LockKey, OwnerId};
use fencelock_testkit::pgbouncer::PgBouncer;
use fencelock_testkit::postgres::{PgSchema, pg_url};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

type BoxedOp = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
type Op = Arc<dyn Fn(usize, u64) -> BoxedOp + Send + Sync>;

struct Outcome {
    ops_per_sec: f64,
    p50: Duration,
    p99: Duration,
}

async fn measure(op: &Op, tasks: usize, time: Duration) -> Outcome {
    // Warm-up: connections opened, statements prepared.
    for task in 0..tasks {
        op(task, 0).await;
    }
    let started = Instant::now();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let op = op.clone();
        handles.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut round = 1;
            while started.elapsed() < time {
                let at = Instant::now();
                op(task, round).await;
                latencies.push(at.elapsed());
                round += 1;
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await.unwrap());
    }
    let elapsed = started.elapsed();
    all.sort();
    let pick = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Outcome {
        ops_per_sec: all.len() as f64 / elapsed.as_secs_f64(),
        p50: pick(0.5),
        p99: pick(0.99),
    }
}

fn lease_cycle(db: &PgDatabase, run: u32) -> Op {
    let backend = Arc::new(db.lease_backend());
    Arc::new(move |task, _| {
        let backend = backend.clone();
        Box::pin(async move {
            let key = LockKey::new(format!("bench/{run}/lease/{task}")).unwrap();
            let lease = backend
                .try_acquire(&key, Duration::from_secs(30))
                .await
                .unwrap()
                .expect("a key of its own is free");
            assert!(backend.release(&lease).await.unwrap());
        })
    })
}

fn fenced_write(db: &PgDatabase, run: u32) -> Op {
    let storage = Arc::new(db.storage());
    let fence = Fence::new(FencingToken::new(1).unwrap(), OwnerId::random());
    Arc::new(move |task, _| {
        let storage = storage.clone();
        Box::pin(async move {
            let key = LockKey::new(format!("bench/{run}/write/{task}")).unwrap();
            storage.write(&key, fence, &[7; 64]).await.unwrap();
        })
    })
}

fn raw_round_trip(pool: &PgPool, simple: bool) -> Op {
    let pool = pool.clone();
    Arc::new(move |_, _| {
        let pool = pool.clone();
        Box::pin(async move {
            if simple {
                pool.execute(sqlx::raw_sql("SELECT 1")).await.unwrap();
            } else {
                sqlx::query("SELECT 1").execute(&pool).await.unwrap();
            }
        })
    })
}

fn raw_update(pool: &PgPool, table: &str, simple: bool) -> Op {
    let pool = pool.clone();
    let table = table.to_owned();
    Arc::new(move |task, _| {
        let (pool, table) = (pool.clone(), table.clone());
        Box::pin(async move {
            if simple {
                let value = "07".repeat(64);
                let text = format!(
                    "UPDATE {table} SET value = decode('{value}', 'hex') WHERE resource = 'r{task}'"
                );
                pool.execute(sqlx::raw_sql(&text)).await.unwrap();
            } else {
                sqlx::query(&format!(
                    "UPDATE {table} SET value = $2 WHERE resource = $1"
                ))
                .bind(format!("r{task}"))
                .bind(&[7u8; 64][..])
                .execute(&pool)
                .await
                .unwrap();
            }
        })
    })
}

async fn connect(url: &str) -> PgDatabase {
    PgConfig::from_url(url)
        .unwrap()
        .pool_size(10)
        .connect()
        .await
        .unwrap()
}

fn row(name: &str, outcome: &Outcome, baseline: Option<&Outcome>) {
    let ratio = baseline.map_or(String::new(), |b| {
        format!("{:>8.2}x", b.ops_per_sec / outcome.ops_per_sec)
    });
    println!(
        "{name:<58} {:>9.0} {:>9.2} {:>9.2} {ratio}",
        outcome.ops_per_sec,
        outcome.p50.as_secs_f64() * 1e3,
        outcome.p99.as_secs_f64() * 1e3,
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let time = Duration::from_secs_f64(args.first().map_or(3.0, |a| a.parse().unwrap()));
    let tasks: usize = args.get(1).map_or(16, |a| a.parse().unwrap());
    let bouncer = tokio::task::spawn_blocking(|| PgBouncer::spawn_with_pool_size(10))
        .await
        .unwrap();
    let schema = PgSchema::create().await;
    let s = schema.name();
    let run = rand_run();

    let through = format!("{}?schema={s}&pooler=transaction", bouncer.url());
    let direct_simple = format!("{}?schema={s}&pooler=transaction", pg_url());
    let direct_prepared = format!("{}?schema={s}&pooler=none", pg_url());
    let bounced = connect(&through).await;
    let simple = connect(&direct_simple).await;
    let prepared = connect(&direct_prepared).await;

    let pool_through = PgPoolOptions::new()
        .max_connections(10)
        .connect_with(bouncer.options())
        .await
        .unwrap();
    let pool_direct = PgPoolOptions::new()
        .max_connections(10)
        .connect(&pg_url())
        .await
        .unwrap();
    let table = format!("{s}.plain");
    let mut ddl = format!("CREATE TABLE {table} (resource text PRIMARY KEY, value bytea);");
    for task in 0..tasks {
        ddl.push_str(&format!("INSERT INTO {table} VALUES ('r{task}', NULL);"));
    }
    pool_direct.execute(sqlx::raw_sql(&ddl)).await.unwrap();

    println!(
        "PostgreSQL through PgBouncer (transaction mode, default_pool_size 10), {tasks} tasks, \
         {time:?} per case, fencelock pools of 10"
    );
    println!(
        "{:<58} {:>9} {:>9} {:>9} {:>9}",
        "case", "ops/s", "p50 ms", "p99 ms", "vs raw"
    );
    let raw_rt = measure(&raw_round_trip(&pool_through, true), tasks, time).await;
    row("pgbouncer: raw SELECT 1 (simple query)", &raw_rt, None);
    let raw_up = measure(&raw_update(&pool_through, &table, true), tasks, time).await;
    row(
        "pgbouncer: raw UPDATE of a plain row (simple query)",
        &raw_up,
        None,
    );
    let o = measure(&lease_cycle(&bounced, run), tasks, time).await;
    row(
        "pgbouncer: fencelock lease try_acquire + release",
        &o,
        Some(&raw_rt),
    );
    let o = measure(&fenced_write(&bounced, run), tasks, time).await;
    row(
        "pgbouncer: fencelock PgStorage fenced write",
        &o,
        Some(&raw_up),
    );

    let d_rt = measure(&raw_round_trip(&pool_direct, false), tasks, time).await;
    row("direct: raw SELECT 1 (prepared)", &d_rt, None);
    let d_up = measure(&raw_update(&pool_direct, &table, false), tasks, time).await;
    row("direct: raw UPDATE of a plain row (prepared)", &d_up, None);
    let p = measure(&lease_cycle(&prepared, run + 1), tasks, time).await;
    row(
        "direct, pooler=none: lease try_acquire + release",
        &p,
        Some(&d_rt),
    );
    let q = measure(&lease_cycle(&simple, run + 2), tasks, time).await;
    row(
        "direct, pooler=transaction: lease try_acquire + release",
        &q,
        Some(&d_rt),
    );
    println!(
        "  pooler-safe statements on a direct connection, lease cycle: {:.2}x the time of prepared",
        p.ops_per_sec / q.ops_per_sec
    );
    let p = measure(&fenced_write(&prepared, run + 1), tasks, time).await;
    row(
        "direct, pooler=none: PgStorage fenced write",
        &p,
        Some(&d_up),
    );
    let q = measure(&fenced_write(&simple, run + 2), tasks, time).await;
    row(
        "direct, pooler=transaction: PgStorage fenced write",
        &q,
        Some(&d_up),
    );
    println!(
        "  pooler-safe statements on a direct connection, fenced write: {:.2}x the time of prepared",
        p.ops_per_sec / q.ops_per_sec
    );
    for db in [&bounced, &simple, &prepared] {
        db.close().await;
    }
    pool_through.close().await;
    pool_direct.close().await;
    schema.cleanup().await;
    drop(bouncer);
}

fn rand_run() -> u32 {
    (OwnerId::random().as_u128() as u32) >> 4
}
