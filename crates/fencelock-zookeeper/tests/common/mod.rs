//! Spawned ZooKeeper servers and connections to them, for the tests of this crate.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_conformance::Setup;
use fencelock_core::OwnerId;
use fencelock_testkit::members::Spawned;
use fencelock_zookeeper::ZkConfig;
pub(crate) use fencelock_zookeeper::servers::ZkMembers;
use fencelock_zookeeper::servers::ZooKeeper;

/// ZooKeeper servers owned by a test: killed and removed on drop.
pub(crate) type ZkServer = Spawned<ZooKeeper>;

/// Starts `members` ZooKeeper servers (off the async threads: it waits for them). A missing
/// install panics, saying to run scripts/test-deps.
pub(crate) async fn spawn(members: usize) -> Arc<ZkServer> {
    tokio::task::spawn_blocking(move || Arc::new(ZkServer::spawn_with(ZooKeeper::plain(), members)))
        .await
        .expect("spawning ZooKeeper panicked")
}

/// The config of `server` with a prefix of its own and a 30 s session (the suite's longest
/// ttl).
pub(crate) fn config(server: &ZkServer) -> ZkConfig {
    ZkConfig::from_url(&server.url())
        .unwrap()
        .prefix(format!("test-{}", OwnerId::random()))
        .session_timeout(Duration::from_secs(30))
}

/// A conformance setup on fresh servers; the outage kills them all.
pub(crate) async fn setup(members: usize) -> Setup {
    let server = spawn(members).await;
    let config = config(&server);
    let backend = config.connect().await.expect("connect to ZooKeeper");
    let victim = server.clone();
    Setup::new(
        Arc::new(backend.clone()),
        Arc::new(backend.storage()),
        Box::new(move || {
            let victim = victim.clone();
            Box::pin(async move {
                tokio::task::spawn_blocking(move || {
                    for index in 0..victim.len() {
                        victim.kill(index);
                    }
                })
                .await
                .expect("killing ZooKeeper panicked");
            })
        }),
    )
    // Reopened as a new process would: a new session to the same ensemble and prefix.
    .with_reopen(Box::new(move || {
        let config = config.clone();
        Box::pin(async move {
            let backend = config.connect().await.expect("reconnect to ZooKeeper");
            Arc::new(backend) as Arc<dyn fencelock_core::LockBackend>
        })
    }))
    .keep(server)
}

/// How many packets member `index` of `server` has received from clients since it started,
/// as its `srvr` command reports it (`Received:`): requests, pings and connection requests
/// of every session.
pub(crate) fn packets_received(server: &ZkServer, index: usize) -> u64 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.client_port(index)))
        .expect("connect for srvr");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(b"srvr").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let line = reply
        .lines()
        .find(|line| line.starts_with("Received: "))
        .unwrap_or_else(|| panic!("srvr said no Received count: {reply}"));
    line.trim_start_matches("Received: ")
        .trim()
        .parse()
        .unwrap()
}
