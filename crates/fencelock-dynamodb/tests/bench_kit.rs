//! The bench kit on moto: the baseline runs, and the cleanup removes every item fencelock
//! wrote for the run (chunk items included) and nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use fencelock_core::{BackendConfig, FencedStorageExt, LockKey, Locker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_measures_and_the_cleanup_removes_only_the_run() {
    let config = common::config().await;
    let kit = BackendConfig::bench_kit(&config).await.unwrap().unwrap();
    assert_eq!(kit.name, "dynamodb");

    let locker = Locker::new(kit.fenced.backend.clone());
    let big = vec![3u8; 400_000];
    for (key, value) in [
        ("run-1/a", &b"v"[..]),
        ("run-1/big", &big[..]),
        ("other/a", &b"v"[..]),
    ] {
        let guard = locker.lock(key).await.unwrap();
        kit.fenced
            .storage
            .write_key(key, guard.fence(), value)
            .await
            .unwrap();
        guard.release().await.unwrap();
    }

    let key = LockKey::new("baseline/k").unwrap();
    let baseline = &kit.baseline;
    assert_eq!(baseline.label(), "raw conditional PutItem + DeleteItem");
    baseline.acquire_release(&key).await.unwrap();
    baseline
        .lock_release(&key, Duration::from_secs(1))
        .await
        .unwrap();
    baseline.round_trip().await.unwrap();
    baseline.writer(&key).await.unwrap().once().await.unwrap();
    assert!(kit.peers.is_empty());

    kit.cleanup.as_ref().unwrap().clean("run-1/").await.unwrap();
    baseline.close().await.unwrap();

    let table = config.connect().await.unwrap();
    let scanned = table
        .client()
        .scan()
        .table_name(table.table())
        .filter_expression("begins_with(pk, :p)")
        .expression_attribute_values(":p", AttributeValue::S(config.prefix_name().to_owned()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let mut left: Vec<String> = scanned
        .items()
        .iter()
        .filter_map(|item| item.get("pk").and_then(|pk| pk.as_s().ok()).cloned())
        .collect();
    left.sort();
    let prefix = config.prefix_name();
    assert_eq!(
        left,
        [
            format!("{prefix}data/other/a"),
            format!("{prefix}lock/other/a")
        ]
    );
}
