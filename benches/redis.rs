//! The Redis backend next to the raw commands a user would otherwise send, on one spawned
//! `redis-server`, in one group so the ratios come out of one run:
//!
//! - acquire + release (one Lua script each) vs `SET key value NX PX ttl` + `DEL key`;
//! - a fenced write (one Lua script) vs a plain `SET`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use fencelock::redis::RedisConfig;
use fencelock::{FencedStorage, LockBackend, LockKey};
use fencelock_testkit::redis::RedisServer;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a Tokio runtime: {e}"))
}

fn redis(c: &mut Criterion) {
    let rt = runtime();
    let server = RedisServer::spawn();
    let ttl = Duration::from_secs(30);
    let value = vec![7u8; 64];
    let lock_key = LockKey::new("bench/acquire-release").unwrap_or_else(|e| panic!("{e}"));
    let data_key = LockKey::new("bench/fenced-write").unwrap_or_else(|e| panic!("{e}"));

    let backend = rt
        .block_on(RedisConfig::new(server.url()).connect())
        .unwrap_or_else(|e| panic!("cannot connect: {e}"));
    let storage = backend.storage();
    let raw = rt
        .block_on(async {
            redis::Client::open(server.url())?
                .get_connection_manager()
                .await
        })
        .unwrap_or_else(|e| panic!("cannot connect: {e}"));

    let mut group = c.benchmark_group("redis");

    group.bench_function("baseline SET NX PX + DEL", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = raw.clone();
            async move {
                let set: Option<String> = redis::cmd("SET")
                    .arg("bench:raw:lock")
                    .arg("owner:1")
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(set.is_some(), "raw lock not granted");
                let deleted: i64 = redis::cmd("DEL")
                    .arg("bench:raw:lock")
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                black_box(deleted);
            }
        })
    });

    group.bench_function("fencelock acquire + release", |b| {
        b.to_async(&rt).iter(|| async {
            let lease = backend
                .try_acquire(&lock_key, ttl)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("not granted"));
            black_box(
                backend
                    .release(&lease)
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        })
    });

    group.bench_function("baseline plain SET", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = raw.clone();
            let value = &value;
            async move {
                let () = redis::cmd("SET")
                    .arg("bench:raw:data")
                    .arg(value.as_slice())
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        })
    });

    let lease = rt
        .block_on(backend.try_acquire(&data_key, Duration::from_secs(3600)))
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("not granted"));
    let fence = lease.fence();
    group.bench_function("fencelock fenced write", |b| {
        b.to_async(&rt).iter(|| async {
            storage
                .write(&data_key, fence, &value)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        })
    });
    group.finish();
}

criterion_group!(benches, redis);
criterion_main!(benches);
