//! The stories fencing exists for, against a real S3-compatible server (moto): a paused
//! holder's late put, two writers racing on one object, and a put whose answer is lost.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, Fence, FencingToken, LockBackend, LockKey, OwnerId};
use fencelock_memory::MemoryLockBackend;
use fencelock_object_store::object_store::path::Path;
use fencelock_object_store::{ObjectFence, ObjectStoreConfig};
use fencelock_servers::proxy::FaultProxy;
use support::moto::moto;
use tokio::sync::Barrier;

async fn fence_on(url: &str) -> ObjectFence {
    let config: ObjectStoreConfig = url.parse().unwrap();
    support::moto::connected(config.connect_fence().await)
}

fn fence(token: u64) -> Fence {
    Fence::new(FencingToken::new(token).unwrap(), OwnerId::random())
}

fn object(name: &str) -> Path {
    Path::from(format!("user-objects/{name}-{}", OwnerId::random()))
}

fn assert_stale<T: std::fmt::Debug>(result: Result<T, Error>, presented: Fence, current: Fence) {
    match result {
        Err(Error::Stale {
            presented: p,
            current: c,
            ..
        }) => assert_eq!((p, c), (presented, current)),
        other => panic!("expected Stale({presented} < {current}), got {other:?}"),
    }
}

/// A holder paused past its lease wakes after its successor wrote: its put is refused and
/// the successor's object is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holders_late_put_is_refused() {
    let fence_store = fence_on(&support::moto::url()).await;
    let backend = MemoryLockBackend::new();
    let key = LockKey::new("report").unwrap();
    let path = object("report");

    let first = backend
        .try_acquire(&key, Duration::from_millis(300))
        .await
        .unwrap()
        .expect("the lock is free");
    assert_eq!(fence_store.get(&path, first.fence()).await.unwrap(), None);
    // The pause: the first holder's lease runs out while it sleeps.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let second = backend
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("the first lease ran out");
    assert!(second.token > first.token);
    fence_store
        .put(&path, second.fence(), b"successor's report")
        .await
        .unwrap();

    assert_stale(
        fence_store.put(&path, first.fence(), b"stale report").await,
        first.fence(),
        second.fence(),
    );
    assert_stale(
        fence_store.get(&path, first.fence()).await,
        first.fence(),
        second.fence(),
    );
    let seen = fence_store.peek(&path).await.unwrap().unwrap();
    assert_eq!(seen.value.as_deref(), Some(&b"successor's report"[..]));
    assert_eq!(seen.fence, second.fence());
}

/// Two writers race puts on one object, many times over: the newer token's put always
/// lands and stays; the older one either landed before it or is refused as stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_leave_the_fence_rules_winner() {
    let fence_store = fence_on(&support::moto::url()).await;
    for round in 0..20u64 {
        let path = object("raced");
        let older = fence(10 + 2 * round);
        let newer = fence(11 + 2 * round);
        // Both have read the object before (as read-modify-write would), in token order.
        fence_store.get(&path, older).await.unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let put = |f: Fence, payload: &'static [u8]| {
            let (store, path, barrier) = (fence_store.clone(), path.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.put(&path, f, payload).await
            })
        };
        let (old_task, new_task) = (put(older, b"older"), put(newer, b"newer"));
        let (old_result, new_result) = (old_task.await.unwrap(), new_task.await.unwrap());
        new_result.unwrap_or_else(|e| panic!("round {round}: the newer put failed: {e}"));
        match old_result {
            Ok(()) => {}
            Err(Error::Stale {
                presented, current, ..
            }) => assert_eq!((presented, current), (older, newer), "round {round}"),
            Err(other) => panic!("round {round}: the older put failed with {other}"),
        }
        let seen = fence_store.peek(&path).await.unwrap().unwrap();
        assert_eq!(seen.fence, newer, "round {round}");
        assert_eq!(seen.value.as_deref(), Some(&b"newer"[..]), "round {round}");
    }
}

/// Two holders that both read, then both write (the lost update of DESIGN section 2): the
/// older one's write is refused, whatever order the writes race in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_read_modify_writes_lose_no_update() {
    let fence_store = fence_on(&support::moto::url()).await;
    let path = object("counter");
    let setup = fence(1);
    fence_store.put(&path, setup, b"0").await.unwrap();
    for round in 0..8u64 {
        let a = fence(10 + 2 * round);
        let b = fence(11 + 2 * round);
        let start = fence_store.get(&path, a).await.unwrap().unwrap();
        assert_eq!(fence_store.get(&path, b).await.unwrap().unwrap(), start);
        let next: u64 = std::str::from_utf8(&start).unwrap().parse::<u64>().unwrap() + 1;
        let barrier = Arc::new(Barrier::new(2));
        let put = |f: Fence| {
            let (store, path, barrier) = (fence_store.clone(), path.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.put(&path, f, next.to_string().as_bytes()).await
            })
        };
        let (ta, tb) = (put(a), put(b));
        assert_stale(ta.await.unwrap(), a, b);
        tb.await.unwrap().unwrap();
    }
    let seen = fence_store.peek(&path).await.unwrap().unwrap();
    assert_eq!(seen.value.as_deref(), Some(&b"8"[..]));
}

/// A put whose answer is lost (the connection reset after the server applied it): the call
/// reports a retryable error that says the put may have landed, and the next operations are
/// decided on what the store really holds: the holder's own read sees its put, a newer
/// holder's put lands, and the first holder's retry is then refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_answer_is_lost_is_decided_by_the_next_operation() {
    let server = moto();
    let direct_url = support::moto::url();
    let direct = fence_on(&direct_url).await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], server.port).into())
        .await
        .unwrap();
    let config: ObjectStoreConfig = direct_url.parse().unwrap();
    let via_proxy = config
        .with_hosts(&[fencelock_core::HostPort::new("127.0.0.1", proxy.port())])
        .unwrap()
        .connect_fence()
        .await
        .unwrap()
        .with_call_timeout(Duration::from_secs(120));

    // Until the answer of one put is lost: a reply may get through before the reset when
    // the machine is slow, which tells nothing, so that try is made again with a new object.
    for attempt in 0..5 {
        let path = object("lost-answer");
        let holder = fence(5);
        via_proxy.put(&path, holder, b"v1").await.unwrap();

        // Every chunk waits in the proxy, so the reply is still there when the put has landed.
        proxy.set_delay(Duration::from_millis(1_500));
        let put = {
            let (store, path) = (via_proxy.clone(), path.clone());
            tokio::spawn(async move { store.put(&path, holder, b"v2").await })
        };
        loop {
            let seen = direct.peek(&path).await.unwrap().unwrap();
            if seen.value.as_deref() == Some(&b"v2"[..]) {
                break;
            }
            assert!(
                !put.is_finished(),
                "the put finished before it was seen landing"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        proxy.set_reset(true);
        let outcome = put.await.unwrap();
        proxy.heal();
        let error = match outcome {
            Ok(()) => {
                eprintln!("attempt {attempt}: the reply got through before the reset; again");
                continue;
            }
            Err(error) => error,
        };
        assert!(error.is_retryable(), "{error}");
        assert!(
            error.to_string().contains("may have been applied"),
            "an unknown outcome must say so: {error}"
        );

        // The holder's next operation finds its own put landed.
        assert_eq!(
            via_proxy.get(&path, holder).await.unwrap().as_deref(),
            Some(&b"v2"[..])
        );
        // A successor writes; the first holder's retry of the lost put is refused.
        let successor = fence(6);
        via_proxy.put(&path, successor, b"successor").await.unwrap();
        assert_stale(via_proxy.put(&path, holder, b"v2").await, holder, successor);
        let seen = direct.peek(&path).await.unwrap().unwrap();
        assert_eq!(seen.value.as_deref(), Some(&b"successor"[..]));
        assert_eq!(seen.fence, successor);
        return;
    }
    panic!("in five tries, no reply was still in the proxy when the put had landed");
}

/// A put that never reaches the server (swallowed by the network) times out as an unknown
/// outcome; the object is unchanged and the next operation is decided on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_that_never_arrives_changes_nothing() {
    let server = moto();
    let direct_url = support::moto::url();
    let direct = fence_on(&direct_url).await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], server.port).into())
        .await
        .unwrap();
    let config: ObjectStoreConfig = direct_url.parse().unwrap();
    let via_proxy = config
        .with_hosts(&[fencelock_core::HostPort::new("127.0.0.1", proxy.port())])
        .unwrap()
        .connect_fence()
        .await
        .unwrap()
        .with_call_timeout(Duration::from_secs(2));
    let path = object("swallowed");
    let holder = fence(5);
    direct.put(&path, holder, b"v1").await.unwrap();

    proxy.set_blackhole(true);
    let error = via_proxy.put(&path, holder, b"v2").await.unwrap_err();
    assert!(error.is_retryable(), "{error}");
    proxy.set_reset(true);
    proxy.heal();

    let successor = fence(6);
    assert_eq!(
        via_proxy.get(&path, successor).await.unwrap().as_deref(),
        Some(&b"v1"[..])
    );
    assert_stale(via_proxy.put(&path, holder, b"v2").await, holder, successor);
    assert_eq!(
        direct.peek(&path).await.unwrap().unwrap().value.as_deref(),
        Some(&b"v1"[..])
    );
}
