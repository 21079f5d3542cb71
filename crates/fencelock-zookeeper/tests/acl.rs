//! With credentials, fencelock uses only a tree whose every node is the credentials' own
//! (DESIGN 8.5): a tree an unauthenticated client created first carries the open ACL, and
//! anyone on the ensemble could reset its counters or lower its fences.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::ZkMembers;

use std::time::Duration;

use fencelock_core::{Error, LockBackend, LockKey};
use fencelock_zookeeper::ZkConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_created_without_credentials_is_refused_with_them() {
    let server = common::spawn(1).await;
    let hosts = server.url().trim_start_matches("zookeeper://").to_owned();
    let prefix = format!("open-{}", fencelock_core::OwnerId::random());
    // Someone without credentials gets there first.
    ZkConfig::from_url(&format!("zookeeper://{hosts}?prefix={prefix}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let with_credentials = ZkConfig::from_url(&format!(
        "zookeeper://app:s3cret-pass@{hosts}?prefix={prefix}"
    ))
    .unwrap();
    match with_credentials.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("world:anyone"), "{message}");
            assert!(message.contains(&prefix), "{message}");
            assert!(
                !message.contains("s3cret-pass"),
                "the password leaked: {message}"
            );
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }

    // A tree of its own, under another prefix, is used.
    let own = ZkConfig::from_url(&format!(
        "zookeeper://app:s3cret-pass@{hosts}?prefix=own-{prefix}"
    ))
    .unwrap()
    .connect()
    .await
    .expect("a tree the credentials created");
    let key = LockKey::new("k").unwrap();
    let lease = own
        .try_acquire(&key, Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a free key");
    assert!(own.release(&lease).await.unwrap());
}
