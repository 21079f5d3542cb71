//! Faults on real etcd clusters: members killed and restarted, a lost quorum, a client cut
//! off past its lease.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::EtcdServer;
use fencelock_core::{
    Error, FencedStorage, FencingToken, HostPort, LockBackend, LockKey, Locker, LostReason, OwnerId,
};
use fencelock_testkit::proxy::FaultProxy;
use tokio::time::{Instant, sleep, timeout};

const TTL: Duration = Duration::from_secs(30);
/// Generous: how long a healthy cluster may take to do something "at once".
const PATIENCE: Duration = Duration::from_secs(20);

fn key(name: &str) -> LockKey {
    LockKey::new(format!("faults/{name}/{}", OwnerId::random())).unwrap()
}

/// Takes and releases `key` `rounds` times through `locker` (waiting up to `PATIENCE` each),
/// checking that tokens strictly increase from `after`. Returns the last token.
async fn cycle(
    locker: &Locker,
    key: &LockKey,
    rounds: usize,
    after: Option<FencingToken>,
) -> FencingToken {
    let mut last = after;
    for round in 0..rounds {
        let guard = locker
            .lock(key.as_str())
            .ttl(TTL)
            .wait(PATIENCE)
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        if let Some(last) = last {
            assert!(
                guard.token() > last,
                "round {round}: token {} after {last}",
                guard.token()
            );
        }
        last = Some(guard.token());
        assert!(
            guard.release().await.unwrap(),
            "round {round}: release lost the lock"
        );
    }
    last.expect("at least one round")
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("blocking task panicked")
}

/// Kills member `index` and waits until the others have a leader again.
async fn kill_member(server: &Arc<EtcdServer>, index: usize) {
    let server = server.clone();
    blocking(move || {
        server.kill(index);
        let deadline = std::time::Instant::now() + PATIENCE;
        while !(0..server.len())
            .filter(|&i| i != index)
            .all(|i| server.is_serving(i))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no leader after a minority was killed"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_keep_working_with_a_minority_killed_and_restarted() {
    let server = common::spawn(3).await;
    let cluster = common::connect(&server).await;
    let locker = Locker::new(cluster.lock_backend());
    let storage = cluster.storage();
    let key = key("minority");
    let mut last = cycle(&locker, &key, 5, None).await;
    for victim in [2, 0, 1] {
        kill_member(&server, victim).await;
        last = cycle(&locker, &key, 10, Some(last)).await;
        let guard = locker
            .lock(key.as_str())
            .ttl(TTL)
            .wait(PATIENCE)
            .await
            .unwrap();
        storage
            .write(&key, guard.fence(), format!("{victim}").as_bytes())
            .await
            .unwrap();
        assert!(guard.release().await.unwrap());
        let restarted = server.clone();
        blocking(move || restarted.restart(victim)).await;
        last = cycle(&locker, &key, 5, Some(last)).await;
    }
    let snapshot = storage
        .peek(&key)
        .await
        .unwrap()
        .expect("the writes are there");
    assert_eq!(snapshot.value.as_deref(), Some(&b"1"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_during_acquires_repeats_no_token_and_grants_once() {
    const TASKS: usize = 4;
    let server = common::spawn(3).await;
    let cluster = common::connect(&server).await;
    let locker = Locker::new(cluster.lock_backend());
    let storage = Arc::new(cluster.storage());
    let key = key("leader");
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (locker, key, storage) = (locker.clone(), key.clone(), storage.clone());
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(6);
            while Instant::now() < deadline {
                let guard = match locker.lock(key.as_str()).ttl(TTL).wait(PATIENCE).await {
                    Ok(guard) => guard,
                    Err(e) if e.is_retryable() => continue,
                    Err(e) => panic!("lock: {e}"),
                };
                tokens.push(guard.token());
                // A fenced read-modify-write: any overlap of two grants would lose an
                // increment or be refused.
                let fence = guard.fence();
                let n = match storage.read(&key, fence).await {
                    Ok(value) => {
                        value.map_or(0u64, |v| String::from_utf8(v).unwrap().parse().unwrap())
                    }
                    Err(e) if e.is_retryable() => {
                        let _ = guard.release().await;
                        tokens.pop();
                        continue;
                    }
                    Err(e) => panic!("read: {e}"),
                };
                match storage
                    .write(&key, fence, (n + 1).to_string().as_bytes())
                    .await
                {
                    Ok(()) => {}
                    Err(e) if e.is_retryable() => {
                        // The write may or may not have applied: count it from the data.
                        let _ = guard.release().await;
                        return (tokens, true);
                    }
                    Err(e) => panic!("write: {e}"),
                }
                let _ = guard.release().await;
            }
            (tokens, false)
        }));
    }
    sleep(Duration::from_secs(1)).await;
    let status = cluster.client().clone().status().await.unwrap();
    let leader = status.leader();
    let members = cluster.client().clone().member_list().await.unwrap();
    let leader_port = members
        .members()
        .iter()
        .find(|m| m.id() == leader)
        .and_then(|m| m.client_urls().first().cloned())
        .and_then(|url| url.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()))
        .expect("the leader's client URL");
    let leader_index = (0..server.len())
        .find(|&i| server.client_port(i) == leader_port)
        .expect("the leader is one of ours");
    kill_member(&server, leader_index).await;
    let mut all = Vec::new();
    let mut unknown_writes = 0;
    for task in tasks {
        let (tokens, unknown) = task.await.unwrap();
        all.extend(tokens);
        unknown_writes += usize::from(unknown);
    }
    let granted = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), granted, "a token was handed out twice");
    let value: usize = String::from_utf8(storage.peek(&key).await.unwrap().unwrap().value.unwrap())
        .unwrap()
        .parse()
        .unwrap();
    // Every grant that finished its write counted once; a write whose answer was lost may
    // have counted or not.
    assert!(
        value + unknown_writes >= granted - unknown_writes && value <= granted,
        "{value} increments for {granted} grants ({unknown_writes} unknown): a grant overlapped another"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_quorum_is_unavailable_within_the_timeout_and_grants_nothing() {
    let server = common::spawn(3).await;
    let limit = Duration::from_secs(2);
    let cluster = common::config(&server)
        .operation_timeout(limit)
        .connect()
        .await
        .unwrap();
    let backend = cluster.lock_backend();
    let key = key("majority");
    let before = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(backend.release(&before).await.unwrap());
    let survivor = server.clone();
    blocking(move || {
        survivor.kill(1);
        survivor.kill(2);
        // Wait until the survivor knows it has no leader.
        let deadline = std::time::Instant::now() + PATIENCE;
        while survivor.is_serving(0) {
            assert!(
                std::time::Instant::now() < deadline,
                "a lone member still reports a leader"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await;
    for round in 0..3 {
        let started = Instant::now();
        let outcome = timeout(limit * 5, backend.try_acquire(&key, TTL))
            .await
            .unwrap_or_else(|_| panic!("round {round}: try_acquire hung past 5 time-outs"));
        match outcome {
            Err(Error::Unavailable { message, .. }) => {
                assert!(
                    message.contains("127.0.0.1"),
                    "the error names no member: {message}"
                )
            }
            other => panic!("round {round}: expected Unavailable, got {other:?}"),
        }
        assert!(started.elapsed() < limit * 5);
    }
    let locker = Locker::new(cluster.lock_backend());
    match timeout(limit * 10, locker.lock(key.as_str()).wait(limit)).await {
        Ok(Err(e)) => assert!(e.is_retryable(), "{e}"),
        Ok(Ok(_)) => panic!("granted without a quorum"),
        Err(_) => panic!("a wait of {limit:?} hung"),
    }
    let storage = cluster.storage();
    let fence = before.fence();
    assert!(matches!(
        timeout(limit * 5, storage.write(&key, fence, b"x")).await,
        Ok(Err(Error::Unavailable { .. }))
    ));
    // Back to a quorum: nothing was granted or written meanwhile.
    let restarted = server.clone();
    blocking(move || {
        restarted.relaunch(1).unwrap();
        restarted.relaunch(2).unwrap();
        let deadline = std::time::Instant::now() + PATIENCE;
        while !(0..3).all(|i| restarted.is_serving(i)) {
            assert!(
                std::time::Instant::now() < deadline,
                "the cluster did not come back"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await;
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(info.holder, None, "a lock was granted without a quorum");
    assert_eq!(
        info.last_token,
        Some(before.token),
        "a token was handed out without a quorum"
    );
    assert_eq!(storage.peek(&key).await.unwrap(), None);
    let after = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(after.token > before.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_frozen_past_its_lease_loses_the_lock_and_its_write_is_refused() {
    let server = common::spawn(1).await;
    let target: SocketAddr = ([127, 0, 0, 1], server.client_port(0)).into();
    let proxy = FaultProxy::start(target).await.unwrap();
    let config = common::config(&server);
    let frozen = config
        .clone()
        .with_hosts(&[HostPort::new("127.0.0.1", proxy.port())])
        .unwrap()
        .operation_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let other = config.connect().await.unwrap();
    let key = key("frozen");
    let storage = frozen.storage();
    let locker = Locker::new(frozen.lock_backend());
    let ttl = Duration::from_secs(2);
    let guard = locker.lock(key.as_str()).ttl(ttl).await.unwrap();
    assert_eq!(storage.read(&key, guard.fence()).await.unwrap(), None);
    // The client stops: none of its renewals reach the cluster.
    proxy.set_blackhole(true);
    let reason = timeout(PATIENCE, guard.lost())
        .await
        .expect("lost() did not fire");
    assert_eq!(reason, LostReason::DeadlinePassed);
    // The cluster frees the lock on its own clock.
    let successor = other.lock_backend();
    let deadline = Instant::now() + PATIENCE;
    let new = loop {
        if let Some(lease) = successor.try_acquire(&key, TTL).await.unwrap() {
            break lease;
        }
        assert!(
            Instant::now() < deadline,
            "the frozen client's lock was never freed"
        );
        sleep(Duration::from_millis(100)).await;
    };
    assert!(new.token > guard.token());
    other
        .storage()
        .write(&key, new.fence(), b"successor")
        .await
        .unwrap();
    // The client wakes up and writes with its old fence: refused.
    proxy.heal();
    let stale = timeout(PATIENCE, async {
        loop {
            match storage.write(&key, guard.fence(), b"frozen").await {
                Err(e) if e.is_retryable() => sleep(Duration::from_millis(100)).await,
                other => return other,
            }
        }
    })
    .await
    .expect("the frozen client's write never returned");
    match stale {
        Err(Error::Stale {
            presented, current, ..
        }) => {
            assert_eq!(presented, guard.fence());
            assert_eq!(current, new.fence());
        }
        other => panic!("expected Stale, got {other:?}"),
    }
    assert!(
        !guard.release().await.unwrap(),
        "the frozen client released its successor"
    );
    let snapshot = other.storage().peek(&key).await.unwrap().unwrap();
    assert_eq!(snapshot.value.as_deref(), Some(&b"successor"[..]));
    assert_eq!(
        successor.inspect(&key).await.unwrap().holder,
        Some(new.fence())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_not_by_its_budget() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend = cluster.lock_backend();
    let key = key("wake");
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());
    let waiter = {
        let backend = backend.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            backend
                .wait_for_release(&key, Duration::from_secs(120))
                .await
                .unwrap();
            started.elapsed()
        })
    };
    sleep(Duration::from_millis(500)).await;
    assert!(
        !waiter.is_finished(),
        "the wait returned while the lock was held"
    );
    assert!(backend.release(&held).await.unwrap());
    let waited = timeout(PATIENCE, waiter)
        .await
        .expect("the release woke no waiter")
        .unwrap();
    assert!(waited < Duration::from_secs(60), "woken after {waited:?}");
    // The lease running out wakes a waiter too (the cluster deletes the key).
    let short = backend
        .try_acquire(&key, Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());
    timeout(
        PATIENCE,
        backend.wait_for_release(&key, Duration::from_secs(120)),
    )
    .await
    .expect("the lease's expiry woke no waiter")
    .unwrap();
    let next = backend
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .expect("free after expiry");
    assert!(next.token > short.token);
}
