//! Faults on real ZooKeeper: a client cut off past its session, a connection cut shorter
//! than the session, a majority of the ensemble killed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use fencelock_core::{Error, FencedStorage, HostPort, LockBackend, LockKey, OwnerId};
use fencelock_servers::proxy::FaultProxy;
use fencelock_zookeeper::ZkConfig;
use tokio::time::{Instant, sleep};

fn key(name: &str) -> LockKey {
    LockKey::new(format!("faults/{name}/{}", OwnerId::random())).unwrap()
}

/// A proxy in front of member 0 and the config through it.
async fn proxied(server: &common::ZkServer, config: &ZkConfig) -> (FaultProxy, ZkConfig) {
    let target: SocketAddr = format!("127.0.0.1:{}", server.client_port(0))
        .parse()
        .unwrap();
    let proxy = FaultProxy::start(target).await.unwrap();
    let via = proxy.addr();
    let config = config
        .clone()
        .with_hosts(&[HostPort::new(via.ip().to_string(), via.port())])
        .unwrap();
    (proxy, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cut_off_past_its_session_loses_the_lock_and_its_writes_are_refused() {
    let server = common::spawn(1).await;
    let direct = common::config(&server);
    let (proxy, via) = proxied(&server, &direct).await;
    let old = via
        .session_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let new = direct.connect().await.unwrap();
    let key = key("paused");
    let lease = old
        .try_acquire(&key, Duration::from_millis(900))
        .await
        .unwrap()
        .expect("free key");
    let storage = new.storage();
    storage.write(&key, lease.fence(), b"old").await.unwrap();
    // The client hears nothing and says nothing: as if paused, past its session timeout.
    proxy.set_blackhole(true);
    sleep(Duration::from_secs(3)).await;
    let next = new
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the expired session's lock is free");
    assert!(next.token > lease.token);
    storage.write(&key, next.fence(), b"new").await.unwrap();
    match storage.write(&key, lease.fence(), b"stale").await {
        Err(Error::Stale { .. }) => {}
        other => panic!("the cut-off holder's write: expected Stale, got {other:?}"),
    }
    proxy.heal();
    // Back on the network, the old client learns its session expired: the lease is lost.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match old.extend(&lease, Duration::from_millis(900)).await {
            Err(Error::LeaseLost { .. }) => break,
            other => assert!(Instant::now() < deadline, "extend after expiry: {other:?}"),
        }
        sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(new.inspect(&key).await.unwrap().holder, Some(next.fence()));
    assert_eq!(
        storage.peek(&key).await.unwrap().unwrap().value.as_deref(),
        Some(&b"new"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_cut_shorter_than_the_session_keeps_the_lock() {
    let server = common::spawn(1).await;
    let direct = common::config(&server);
    let (proxy, via) = proxied(&server, &direct).await;
    let holder = via
        .session_timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let other = direct.connect().await.unwrap();
    let key = key("cut");
    let lease = holder
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("free key");
    proxy.set_reset(true);
    sleep(Duration::from_secs(1)).await;
    assert!(
        other
            .try_acquire(&key, Duration::from_secs(10))
            .await
            .unwrap()
            .is_none()
    );
    proxy.heal();
    let deadline = Instant::now() + Duration::from_secs(8);
    let extended = loop {
        match holder.extend(&lease, Duration::from_secs(10)).await {
            Ok(extended) => break extended,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("extend after a short cut: {e}"),
        }
    };
    assert_eq!(extended.token, lease.token);
    assert!(
        other
            .try_acquire(&key, Duration::from_secs(10))
            .await
            .unwrap()
            .is_none()
    );
    assert!(holder.release(&extended).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_killed_is_unavailable_within_the_wait_and_grants_nothing() {
    let server = common::spawn(3).await;
    let backend = common::config(&server)
        .session_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap();
    let key = key("majority");
    let lease = backend
        .try_acquire(&key, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert!(backend.release(&lease).await.unwrap());
    let victims = server.clone();
    tokio::task::spawn_blocking(move || {
        victims.kill(1);
        victims.kill(2);
    })
    .await
    .unwrap();
    let started = Instant::now();
    match backend.try_acquire(&key, Duration::from_secs(2)).await {
        Err(e) => assert!(e.is_retryable(), "{e}"),
        Ok(granted) => panic!("granted without a quorum: {granted:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
