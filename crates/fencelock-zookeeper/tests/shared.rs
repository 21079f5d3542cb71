//! Shared (reader) locks on real ZooKeeper, beyond the conformance suite: readers that start
//! a phase at once from separate sessions agree on one fence, a queued writer keeps later
//! readers out and is granted above the phase, and a reader whose session ends is lost and
//! fenced out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use fencelock_core::{Error, FencedStorage, HostPort, LockBackend, LockKey, LostReason, OwnerId};
use fencelock_servers::proxy::FaultProxy;
use tokio::time::{sleep, timeout};

const TTL: Duration = Duration::from_secs(20);

fn key(name: &str) -> LockKey {
    LockKey::new(format!("shared/{name}/{}", OwnerId::random())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_starting_at_once_from_separate_sessions_share_one_fence() {
    let server = common::spawn(1).await;
    let config = common::config(&server);
    let mut backends = Vec::new();
    for _ in 0..4 {
        backends.push(config.connect().await.unwrap());
    }
    for round in 0..5 {
        let key = key(&format!("race-{round}"));
        let tries = backends.iter().map(|b| {
            let b = b.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let reader = OwnerId::random();
                let lease = b.try_acquire_shared(&key, reader, TTL).await.unwrap();
                (
                    b,
                    lease.expect("a reader was refused without a writer"),
                    reader,
                )
            })
        });
        let mut held = Vec::new();
        for task in tries.collect::<Vec<_>>() {
            held.push(task.await.unwrap());
        }
        let fence = held[0].1.fence();
        for (_, lease, _) in &held {
            assert_eq!(lease.fence(), fence, "readers of one phase got two fences");
        }
        let phase = backends[0].inspect_shared(&key).await.unwrap().unwrap();
        assert_eq!((phase.fence, phase.readers), (fence, held.len()));
        for (b, lease, reader) in held {
            assert!(b.release_shared(&lease, reader).await.unwrap());
        }
        assert!(backends[0].inspect_shared(&key).await.unwrap().is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_writer_keeps_later_readers_out_and_is_granted_above_the_phase() {
    let server = common::spawn(1).await;
    let b = common::config(&server).connect().await.unwrap();
    let key = key("queued-writer");
    let first = OwnerId::random();
    let r = b
        .try_acquire_shared(&key, first, TTL)
        .await
        .unwrap()
        .unwrap();
    let waiter = OwnerId::random();
    assert!(
        b.try_acquire_queued(&key, TTL, waiter)
            .await
            .unwrap()
            .is_none(),
        "a writer got in beside a reader"
    );
    // The writer's place precedes any new reader: it is not overtaken.
    assert!(
        b.try_acquire_shared(&key, OwnerId::random(), TTL)
            .await
            .unwrap()
            .is_none(),
        "a reader overtook a queued writer"
    );
    // The reader in the phase is still renewed (asking again renews it).
    let again = b
        .try_acquire_shared(&key, first, TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.fence(), r.fence());
    assert!(b.release_shared(&r, first).await.unwrap());
    let w = b
        .try_acquire_queued(&key, TTL, waiter)
        .await
        .unwrap()
        .expect("the queued writer was not granted after the last reader left");
    assert!(
        w.token > r.token,
        "writer {} not above phase {}",
        w.token,
        r.token
    );
    assert!(b.release(&w).await.unwrap());
    let next = OwnerId::random();
    let r2 = b
        .try_acquire_shared(&key, next, TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(
        r2.token > w.token,
        "phase {} not above writer {}",
        r2.token,
        w.token
    );
    assert!(b.release_shared(&r2, next).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_cut_off_past_its_session_is_lost_and_fenced_out() {
    let server = common::spawn(1).await;
    let direct = common::config(&server);
    let target: SocketAddr = format!("127.0.0.1:{}", server.client_port(0))
        .parse()
        .unwrap();
    let proxy = FaultProxy::start(target).await.unwrap();
    let via = proxy.addr();
    let old = direct
        .clone()
        .with_hosts(&[HostPort::new(via.ip().to_string(), via.port())])
        .unwrap()
        .session_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let new = direct.connect().await.unwrap();
    let storage = new.storage();
    let key = key("session-ends");
    let reader = OwnerId::random();
    let r = old
        .try_acquire_shared(&key, reader, Duration::from_millis(900))
        .await
        .unwrap()
        .expect("free key");
    storage.read(&key, r.fence()).await.unwrap();
    assert!(
        new.try_acquire(&key, TTL).await.unwrap().is_none(),
        "a writer beside a reader"
    );
    let lost = tokio::spawn({
        let old = old.clone();
        let r = r.clone();
        async move { old.watch_lost_shared(&r, reader).await }
    });
    // The reader's client hears nothing and says nothing, past its session timeout.
    proxy.set_blackhole(true);
    sleep(Duration::from_secs(3)).await;
    let w = new
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .expect("the cut-off reader kept the writer out");
    assert!(
        w.token > r.token,
        "writer {} not above phase {}",
        w.token,
        r.token
    );
    storage.write(&key, w.fence(), b"writer").await.unwrap();
    match storage.read(&key, r.fence()).await {
        Err(Error::Stale { .. }) => {}
        other => panic!("the cut-off reader's read: expected Stale, got {other:?}"),
    }
    proxy.heal();
    let reason = timeout(Duration::from_secs(30), lost)
        .await
        .expect("watch_lost_shared never saw the session end")
        .unwrap();
    assert_eq!(reason, LostReason::SessionEnded);
    assert!(matches!(
        old.extend_shared(&r, reader, Duration::from_millis(900))
            .await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(new.release(&w).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_kept_out_by_a_writer_behind_readers_wakes_when_that_writer_goes() {
    let server = common::spawn(1).await;
    let b = common::config(&server).connect().await.unwrap();
    let key = key("wake-behind-readers");
    let first = OwnerId::random();
    let r = b
        .try_acquire_shared(&key, first, TTL)
        .await
        .unwrap()
        .unwrap();
    let waiter = OwnerId::random();
    assert!(
        b.try_acquire_queued(&key, TTL, waiter)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        b.try_acquire_shared(&key, OwnerId::random(), TTL)
            .await
            .unwrap()
            .is_none()
    );
    // The reader stays; only the writer that keeps new readers out leaves.
    let wait = tokio::spawn({
        let b = b.clone();
        let key = key.clone();
        async move { b.wait_for_release(&key, Duration::from_secs(120)).await }
    });
    // Time for the wait to set its watch (a wait that lists later, after the leave, would
    // watch the reader and fail this test by the timeout below, never pass it wrongly).
    sleep(Duration::from_secs(2)).await;
    b.leave_queue(&key, waiter).await.unwrap();
    timeout(Duration::from_secs(60), wait)
        .await
        .expect("the wait did not end when the writer keeping readers out left")
        .unwrap()
        .unwrap();
    let next = OwnerId::random();
    let joined = b
        .try_acquire_shared(&key, next, TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(joined.fence(), r.fence());
    assert!(b.release_shared(&joined, next).await.unwrap());
    assert!(b.release_shared(&r, first).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_phase_when_its_first_reader_lapsed() {
    let server = common::spawn(1).await;
    let b = common::config(&server).connect().await.unwrap();
    let key = key("first-lapsed");
    let (early, late) = (OwnerId::random(), OwnerId::random());
    let short = b
        .try_acquire_shared(&key, early, Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    let long = b
        .try_acquire_shared(&key, late, TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(short.fence(), long.fence());
    // Nobody contends, so the lapsed first reader's node stays at the head of the queue.
    sleep(Duration::from_secs(3)).await;
    let phase = b
        .inspect_shared(&key)
        .await
        .unwrap()
        .expect("the phase ended early");
    assert_eq!((phase.fence, phase.readers), (long.fence(), 1));
    let info = b.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder,
        Some(long.fence()),
        "inspect lost the live phase"
    );
    assert!(info.remaining.is_some());
    assert!(b.release_shared(&long, late).await.unwrap());
}
