//! The `metrics` feature: the values a recorder sees after a lock cycle, a renewal, a lost
//! lease, a stale write refused by a `MeteredStorage` and a set granted in one step.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock_core::metrics::MeteredStorage;
use fencelock_core::{Error, FencedStorage, LockKey, Locker, LostReason};
use fencelock_memory::{MemoryLockBackend, MemoryStorage};
use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// One snapshot of every metric (taking one drains the histograms, so a test takes one).
type Snapshot = Vec<(
    CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// The value of the metric `name` whose labels include every pair of `labels`.
fn value<'s>(
    snapshot: &'s Snapshot,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<&'s DebugValue> {
    snapshot
        .iter()
        .find(|(key, _, _, _)| {
            let key = key.key();
            key.name() == name
                && labels.iter().all(|(k, v)| {
                    key.labels()
                        .any(|label| label.key() == *k && label.value() == *v)
                })
        })
        .map(|(_, _, _, value)| value)
}

fn counter(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
    match value(snapshot, name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        other => panic!("{name} is not a counter: {other:?}"),
    }
}

fn samples(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> usize {
    match value(snapshot, name, labels) {
        Some(DebugValue::Histogram(samples)) => samples.len(),
        None => 0,
        other => panic!("{name} is not a histogram: {other:?}"),
    }
}

#[tokio::test]
async fn a_recorder_sees_grants_renewals_losses_and_stale_writes() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("no other recorder in this test binary");
    let memory = [("backend", "memory")];

    let locker = Locker::new(MemoryLockBackend::new());
    // A lock cycle with one renewal.
    let guard = locker.lock("metrics/cycle").await.unwrap();
    guard.extend(Duration::from_secs(30)).await.unwrap();
    let fence = guard.fence();
    assert!(guard.release().await.unwrap());
    // A lease lost at its deadline.
    let lost = locker
        .lock("metrics/lost")
        .ttl(Duration::from_millis(50))
        .watchdog(false)
        .await
        .unwrap();
    assert_eq!(lost.lost().await, LostReason::DeadlinePassed);
    // A request that times out while another holds the lock.
    let holder = locker.lock("metrics/held").await.unwrap();
    // Another holder (a clone) times out; the holder itself would be refused as re-entry.
    assert!(
        locker
            .clone()
            .try_lock("metrics/held")
            .await
            .unwrap()
            .is_none()
    );
    drop(holder);
    // A stale write refused by the storage.
    let storage = MeteredStorage::new(MemoryStorage::new());
    let resource = LockKey::new("metrics/resource").unwrap();
    let newer = locker.lock("metrics/cycle").await.unwrap();
    storage
        .write(&resource, newer.fence(), b"new")
        .await
        .unwrap();
    assert!(matches!(
        storage.write(&resource, fence, b"old").await,
        Err(Error::Stale { .. })
    ));
    drop(newer);
    // A set of three, granted in one step: three grants, as when taken key by key.
    assert!(locker.backend().capabilities().atomic_sets);
    let set = locker
        .lock_all(["metrics/set-a", "metrics/set-b", "metrics/set-c"])
        .await
        .unwrap();
    assert!(set.release().await.unwrap());

    let s = &snapshotter.snapshot().into_vec();
    assert_eq!(counter(s, "fencelock_grants_total", &memory), 7);
    let granted = [("backend", "memory"), ("outcome", "granted")];
    assert_eq!(samples(s, "fencelock_wait_seconds", &granted), 7);
    let timeout = [("backend", "memory"), ("outcome", "timeout")];
    assert_eq!(samples(s, "fencelock_wait_seconds", &timeout), 1);
    let renewed = [("backend", "memory"), ("outcome", "renewed")];
    assert_eq!(counter(s, "fencelock_renewals_total", &renewed), 1);
    assert_eq!(samples(s, "fencelock_renewal_seconds", &memory), 1);
    let deadline = [("backend", "memory"), ("reason", "deadline_passed")];
    assert_eq!(counter(s, "fencelock_leases_lost_total", &deadline), 1);
    let released = [("backend", "memory"), ("reason", "released")];
    assert_eq!(counter(s, "fencelock_leases_lost_total", &released), 0);
    // The cycle, the lost lease, the two dropped guards and the set's three members.
    assert_eq!(samples(s, "fencelock_hold_seconds", &memory), 7);
    let stale = [("operation", "write"), ("outcome", "stale")];
    assert_eq!(counter(s, "fencelock_storage_operations_total", &stale), 1);
    let admitted = [("operation", "write"), ("outcome", "admitted")];
    assert_eq!(
        counter(s, "fencelock_storage_operations_total", &admitted),
        1
    );
}
