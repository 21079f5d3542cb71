//! The bench kit on the real server: the baseline runs, and the cleanup removes the run's
//! rows from fencelock's tables and nothing else.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use fencelock_core::{BackendConfig, FencedStorageExt, LockKey, Locker};
use fencelock_mysql::sqlx;

#[tokio::test]
async fn the_kit_measures_and_the_cleanup_removes_only_the_run() {
    let config = common::config("k");
    let _drop = common::Cleanup::new(config.clone());
    let kit = BackendConfig::bench_kit(&config).await.unwrap().unwrap();
    assert_eq!(kit.name, "mysql");
    assert!(kit.peers.is_empty());

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

    let key = LockKey::new("baseline/k").unwrap();
    let baseline = &kit.baseline;
    assert_eq!(baseline.label(), "raw GET_LOCK + RELEASE_LOCK");
    baseline.acquire_release(&key).await.unwrap();
    baseline
        .lock_release(&key, Duration::from_secs(1))
        .await
        .unwrap();
    baseline.round_trip().await.unwrap();
    let writer = baseline.writer(&key).await.unwrap();
    writer.once().await.unwrap();
    writer.finish().await.unwrap();

    kit.cleanup.as_ref().unwrap().clean("run-1/").await.unwrap();
    baseline.close().await.unwrap();

    let db = config.clone().install(false).connect().await.unwrap();
    let prefix = config.prefix_name();
    for (table, column) in [("counters", "lock_key"), ("storage", "resource")] {
        // The live-epoch marker (a NUL byte and the server id) is no key, and stays.
        let select = format!(
            "SELECT {column} FROM {prefix}{table} WHERE LEFT({column}, 1) <> X'00' ORDER BY 1"
        );
        let keys: Vec<Vec<u8>> = sqlx::query_scalar(&select)
            .fetch_all(db.pool())
            .await
            .unwrap();
        assert_eq!(keys, vec![b"other/a".to_vec()], "{table}");
    }
    db.close().await;
}
