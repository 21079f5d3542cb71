//! One round trip per uncontended grant and per release (DESIGN 4.0, *Round trips*), counted
//! at the TCP level by a proxy between the backend and a Redis server of the test's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fencelock_core::{LockBackend, LockKey};
use fencelock_redis::RedisConfig;
use fencelock_redis::servers::RedisServer;
use fencelock_testkit::proxy::{FaultProxy, uncontended_round_trips};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_grant_and_a_release_are_one_round_trip_each() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let backend = RedisConfig::from_url(&format!("redis://127.0.0.1:{}", proxy.port()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("round-trips").unwrap();
    let counted = uncontended_round_trips(&proxy, &backend, &key, 5).await;
    // Each is one script call, answered at once.
    counted.assert_each(backend.name(), 1, 1);
}
