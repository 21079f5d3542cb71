//! The bench kit on a spawned member: the baseline and the peer run, and the cleanup removes
//! every key fencelock wrote for the run (readers included) and nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::tools::Peer;
use fencelock_core::{BackendConfig, FencedStorageExt, LockKey, Locker, OwnerId};
use fencelock_etcd::etcd_client::GetOptions;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test]
async fn the_kit_measures_and_the_cleanup_removes_only_the_run() {
    let server = common::spawn(1).await;
    let config = common::config(&server);
    let kit = BackendConfig::bench_kit(&config).await.unwrap().unwrap();
    assert_eq!(kit.name, "etcd-1");

    let locker = Locker::new(kit.fenced.backend.clone());
    for key in ["run-1/a", "run-1/b", "other/a"] {
        let guard = locker.lock(key).await.unwrap();
        kit.fenced
            .storage
            .write_key(key, guard.fence(), b"v")
            .await
            .unwrap();
        guard.release().await.unwrap();
    }
    // Readers left behind, as by a process that ended without releasing.
    for key in ["run-1/r", "other/r"] {
        let key = LockKey::new(key).unwrap();
        let held = kit
            .fenced
            .backend
            .try_acquire_shared(&key, OwnerId::random(), TTL);
        assert!(held.await.unwrap().is_some());
    }

    let key = LockKey::new("baseline/k").unwrap();
    let baseline = &kit.baseline;
    assert_eq!(baseline.label(), "raw put-if-absent txn + delete");
    baseline.acquire_release(&key).await.unwrap();
    baseline
        .lock_release(&key, Duration::from_secs(1))
        .await
        .unwrap();
    baseline.round_trip().await.unwrap();
    baseline.writer(&key).await.unwrap().once().await.unwrap();
    let [Peer::Raw(peer)] = kit.peers.as_slice() else {
        panic!("one raw peer: {:?}", kit.peers);
    };
    assert_eq!(
        peer.label(),
        "etcd v3 Lock + Unlock (a session lease per call)"
    );
    peer.acquire_release(&key).await.unwrap();
    peer.lock_release(&key, Duration::from_secs(1))
        .await
        .unwrap();

    kit.cleanup.as_ref().unwrap().clean("run-1/").await.unwrap();
    baseline.close().await.unwrap();

    let cluster = config.connect().await.unwrap();
    let mut kv = cluster.client().kv_client();
    let all = kv
        .get(
            config.prefix_name(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .unwrap();
    let mut left: Vec<String> = all
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect();
    // The reader's own id ends its key.
    for name in &mut left {
        if let Some(at) = name.find("/read/7:other/r/") {
            name.truncate(at + "/read/7:other/r/".len());
        }
    }
    let prefix = config.prefix_name();
    let expected: Vec<String> = [
        "data/other/a",
        "fence/other/a",
        "read/7:other/r/",
        "token/other/a",
        "token/other/r",
    ]
    .iter()
    .map(|name| format!("{prefix}/{name}"))
    .collect();
    assert_eq!(left, expected);
}
