//! The spawner of `dynamodb://` (feature `servers`): one moto server behind the serializing
//! proxy, a table on it, the lock and the storage there; no node for the kill fault.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock_core::tools::SpawnRequest;
use fencelock_core::{Error, FencedStorage, LockBackend, LockKey};
use fencelock_dynamodb::SCHEMES;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_moto_serves_the_lock_and_the_storage_and_offers_nothing_to_kill() {
    let spawn = SCHEMES[0].spawn.expect("dynamodb:// spawns with `servers`");
    match spawn(SpawnRequest::new(3, "three")).await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("one moto server"), "{message}");
        }
        other => panic!("three nodes: {other:?}"),
    }
    let servers = spawn(SpawnRequest::new(1, "spawned")).await.unwrap();
    assert_eq!((servers.nodes(), servers.kill_at_most()), (0, 0));
    assert!(
        servers.describe().contains("never killed"),
        "{}",
        servers.describe()
    );
    assert!(
        servers.storage().is_none(),
        "the storage is on the lock's table"
    );
    let lock = servers.lock();
    assert!(
        lock.to_url().contains("fencelock-chaos") && !lock.to_url().contains("create=true"),
        "{}",
        lock.to_url()
    );
    let connected = lock.connect().await.unwrap();
    let key = LockKey::new("spawned").unwrap();
    let first = connected
        .backend
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    connected
        .storage
        .write(&key, first.fence(), b"one")
        .await
        .unwrap();
    assert!(connected.backend.release(&first).await.unwrap());
    let second = connected
        .backend
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert!(second.token > first.token);
    connected
        .storage
        .write(&key, second.fence(), b"two")
        .await
        .unwrap();
    let refused = connected.storage.write(&key, first.fence(), b"stale").await;
    assert!(matches!(refused, Err(Error::Stale { .. })), "{refused:?}");
    // Dropping the set stops the proxy: the lock is no longer reachable there.
    let url = lock.to_url();
    drop(servers);
    let config = fencelock_dynamodb::DynamoConfig::from_url(&url)
        .unwrap()
        .operation_timeout(Duration::from_secs(2));
    assert!(
        config.connect().await.is_err(),
        "the proxy outlived its set"
    );
}
