//! What an uncontended grant and release cost on the wire, counted by the fault proxy: one
//! request each (the grant's `UpdateItem` carries the token counter's increment).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{LockBackend, LockKey, OwnerId};
use fencelock_dynamodb::DynamoConfig;
use fencelock_servers::proxy::FaultProxy;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_and_a_release_are_one_request_each() {
    let moto = common::moto().await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], moto.port).into())
        .await
        .unwrap();
    let table =
        DynamoConfig::from_url(&common::url_at(proxy.port(), common::TABLE, "&create=true"))
            .unwrap()
            .prefix(format!("test-{}/", OwnerId::random()))
            .connect()
            .await
            .unwrap();
    let backend = table.backend();
    let key = LockKey::new("counted").unwrap();
    // Warm-up: the connection is open and pooled.
    let lease = backend
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    backend.release(&lease).await.unwrap();
    let mut counts = Vec::new();
    for _ in 0..5 {
        let before = proxy.exchanges();
        let lease = backend
            .try_acquire(&key, Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        let granted = proxy.exchanges();
        assert!(backend.release(&lease).await.unwrap());
        counts.push((granted - before, proxy.exchanges() - granted));
    }
    let total: u64 = counts.iter().map(|(g, r)| g + r).sum();
    assert_eq!(total, 10, "exchanges per (grant, release): {counts:?}");
}
