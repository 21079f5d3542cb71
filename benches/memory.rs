//! The memory backend next to the baseline a user would otherwise write: a
//! `tokio::sync::Mutex<HashMap>` holding the lock table. Ratios come out of one run.

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use fencelock::memory::{MemoryLockBackend, MemoryStorage};
use fencelock::{FencedStorage, LockBackend, LockKey};
use tokio::sync::Mutex;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a Tokio runtime: {e}"))
}

fn acquire_release(c: &mut Criterion) {
    let rt = runtime();
    let key = LockKey::new("bench/acquire-release").unwrap_or_else(|e| panic!("{e}"));
    let ttl = Duration::from_secs(30);
    let mut group = c.benchmark_group("memory/acquire_release");

    let table: Mutex<HashMap<String, u64>> = Mutex::new(HashMap::new());
    let mut counter = 0u64;
    group.bench_function("baseline tokio::sync::Mutex<HashMap>", |b| {
        b.to_async(&rt).iter(|| {
            counter += 1;
            let token = counter;
            let table = &table;
            async move {
                let mut map = table.lock().await;
                if !map.contains_key("bench/acquire-release") {
                    map.insert("bench/acquire-release".to_owned(), token);
                }
                drop(map);
                black_box(table.lock().await.remove("bench/acquire-release"));
            }
        })
    });

    let backend = MemoryLockBackend::new();
    group.bench_function("fencelock memory", |b| {
        b.to_async(&rt).iter(|| async {
            let lease = backend.try_acquire(&key, ttl).await;
            let lease = lease
                .ok()
                .flatten()
                .unwrap_or_else(|| panic!("not granted"));
            black_box(backend.release(&lease).await.ok());
        })
    });
    group.finish();
}

fn fenced_write(c: &mut Criterion) {
    let rt = runtime();
    let key = LockKey::new("bench/fenced-write").unwrap_or_else(|e| panic!("{e}"));
    let value = vec![7u8; 64];
    let mut group = c.benchmark_group("memory/write");

    let plain: Mutex<HashMap<String, Vec<u8>>> = Mutex::new(HashMap::new());
    group.bench_function("baseline tokio::sync::Mutex<HashMap> insert", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(
                plain
                    .lock()
                    .await
                    .insert("bench/fenced-write".to_owned(), value.clone()),
            );
        })
    });

    let backend = MemoryLockBackend::new();
    let storage = MemoryStorage::new();
    let lease = rt
        .block_on(backend.try_acquire(&key, Duration::from_secs(3600)))
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("not granted"));
    let fence = lease.fence();
    group.bench_function("fencelock memory fenced write", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(storage.write(&key, fence, &value).await.ok()) })
    });
    group.finish();
}

criterion_group!(benches, acquire_release, fenced_write);
criterion_main!(benches);
