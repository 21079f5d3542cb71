//! Redlock next to what a user would compare it with, on the same spawned `redis-server`s, in
//! one group so the ratios come out of one run. Every case is one acquire + one release of a
//! free key:
//!
//! - fencelock `RedisLockBackend` on one node (the baseline);
//! - fencelock `Redlock` on 3 and on 5 nodes;
//! - the `rslock` crate on the same 3 and 5 nodes;
//! - both Redlocks on 5 nodes, one of them behind a TCP proxy that adds 50 ms each way.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use fencelock::redis::{RedisConfig, Redlock, RedlockConfig};
use fencelock::{LockBackend, LockKey};
use fencelock_redis::servers::RedisServer;
use fencelock_testkit::proxy::FaultProxy;

const TTL: Duration = Duration::from_secs(30);
const SLOW: Duration = Duration::from_millis(50);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a Tokio runtime: {e}"))
}

fn key(name: &str) -> LockKey {
    LockKey::new(format!("bench/{name}")).unwrap_or_else(|e| panic!("{e}"))
}

async fn redlock(urls: &[String]) -> Redlock {
    RedlockConfig::new(urls.iter().cloned())
        .connect()
        .await
        .unwrap_or_else(|e| panic!("cannot connect: {e}"))
}

fn rslock(urls: &[String]) -> rslock::LockManager {
    rslock::LockManager::new(urls.to_vec())
}

/// One fencelock backend: acquire + release of `key`.
fn bench_fencelock(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &tokio::runtime::Runtime,
    name: &str,
    backend: &dyn LockBackend,
) {
    let key = key(name);
    group.bench_function(name, |b| {
        b.to_async(rt).iter(|| async {
            let lease = backend
                .try_acquire(&key, TTL)
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
}

/// rslock: lock + unlock of `name`.
fn bench_rslock(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &tokio::runtime::Runtime,
    name: &str,
    manager: &rslock::LockManager,
) {
    let resource = format!("bench:rslock:{name}").into_bytes();
    group.bench_function(name, |b| {
        b.to_async(rt).iter(|| async {
            let lock = manager
                .lock(resource.as_slice(), TTL)
                .await
                .unwrap_or_else(|e| panic!("rslock: {e:?}"));
            manager.unlock(&lock).await;
            black_box(lock.validity_time);
        })
    });
}

fn redlock_group(c: &mut Criterion) {
    let rt = runtime();
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::spawn()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let proxy = rt
        .block_on(FaultProxy::start(servers[0].addr()))
        .unwrap_or_else(|e| panic!("cannot start the proxy: {e}"));
    let mut slowed = urls.clone();
    slowed[0] = format!("redis://127.0.0.1:{}", proxy.port());

    let one = rt
        .block_on(RedisConfig::new(urls[0].as_str()).connect())
        .unwrap_or_else(|e| panic!("cannot connect: {e}"));
    let three = rt.block_on(redlock(&urls[..3]));
    let five = rt.block_on(redlock(&urls));
    let five_slowed = rt.block_on(redlock(&slowed));
    proxy.set_delay(SLOW);

    let mut group = c.benchmark_group("redlock");
    bench_fencelock(&mut group, &rt, "redis one node", &one);
    bench_fencelock(&mut group, &rt, "redlock 3 nodes", &three);
    bench_fencelock(&mut group, &rt, "redlock 5 nodes", &five);
    bench_rslock(&mut group, &rt, "rslock 3 nodes", &rslock(&urls[..3]));
    bench_rslock(&mut group, &rt, "rslock 5 nodes", &rslock(&urls));
    bench_fencelock(
        &mut group,
        &rt,
        "redlock 5 nodes, one slowed 50 ms",
        &five_slowed,
    );
    bench_rslock(
        &mut group,
        &rt,
        "rslock 5 nodes, one slowed 50 ms",
        &rslock(&slowed),
    );
    group.finish();
}

criterion_group!(benches, redlock_group);
criterion_main!(benches);
