//! Spawned etcd clusters and connections to them, for the tests of this crate.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use fencelock_conformance::Setup;
use fencelock_core::OwnerId;
use fencelock_etcd::servers::Etcd;
pub(crate) use fencelock_etcd::servers::EtcdMembers;
use fencelock_etcd::{EtcdCluster, EtcdConfig};
use fencelock_testkit::members::Spawned;

/// etcd members owned by a test: killed and removed on drop.
pub(crate) type EtcdServer = Spawned<Etcd>;

/// Starts `members` etcd members (off the async threads: it waits for them).
pub(crate) async fn spawn(members: usize) -> Arc<EtcdServer> {
    tokio::task::spawn_blocking(move || Arc::new(EtcdServer::spawn_with(Etcd, members)))
        .await
        .expect("spawning etcd panicked")
}

/// The config of `server` with a prefix of its own.
pub(crate) fn config(server: &EtcdServer) -> EtcdConfig {
    EtcdConfig::from_url(&server.url())
        .unwrap()
        .prefix(format!("test-{}", OwnerId::random()))
}

/// Connects to `server` under a prefix of its own.
pub(crate) async fn connect(server: &EtcdServer) -> EtcdCluster {
    config(server).connect().await.expect("connect to etcd")
}

/// A conformance setup on a fresh cluster of `members` members; the outage kills them all.
pub(crate) async fn setup(members: usize) -> Setup {
    let server = spawn(members).await;
    let config = config(&server);
    let cluster = config.connect().await.expect("connect to etcd");
    let victim = server.clone();
    Setup::new(
        cluster.backend(),
        Arc::new(cluster.storage()),
        Box::new(move || {
            let victim = victim.clone();
            Box::pin(async move {
                tokio::task::spawn_blocking(move || {
                    for index in 0..victim.len() {
                        victim.kill(index);
                    }
                })
                .await
                .expect("killing etcd panicked");
            })
        }),
    )
    // Reopened as a new process would: a new client to the same cluster and prefix.
    .with_reopen(Box::new(move || {
        let config = config.clone();
        Box::pin(async move { config.connect().await.expect("reconnect to etcd").backend() })
    }))
    .keep(server)
}
