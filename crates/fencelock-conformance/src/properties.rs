//! The properties. Each takes a fresh [`Setup`] and panics, naming what broke, when the backend
//! does not meet the contract. Keys are random per call, so properties may share a server.
//!
//! Timing uses real time with generous margins (ttls of a few hundred milliseconds, waits of
//! several times that), so the suite runs against real servers on a loaded machine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock_core::{
    Error, Fence, FencedStorage, FencingToken, Lease, LockBackend, LockKey, Locker, LostReason,
    OwnerId, Snapshot,
};
use tokio::time::{Instant, sleep, timeout};

use crate::Setup;

/// A ttl short enough to wait out in a test.
const SHORT_TTL: Duration = Duration::from_millis(300);
/// Waiting this long after a [`SHORT_TTL`] grant is past its expiry on any honest backend.
const PAST_SHORT_TTL: Duration = Duration::from_millis(900);
/// A ttl no test outlives.
const LONG_TTL: Duration = Duration::from_secs(30);
/// How long a test waits for something that should happen "at once".
const PATIENCE: Duration = Duration::from_secs(10);

fn key(name: &str) -> LockKey {
    LockKey::new(format!("conformance/{name}/{}", OwnerId::random())).unwrap()
}

async fn grant(backend: &dyn LockBackend, key: &LockKey, ttl: Duration) -> Lease {
    backend
        .try_acquire(key, ttl)
        .await
        .expect("try_acquire failed")
        .unwrap_or_else(|| panic!("{} refused a free key {key:?}", backend.name()))
}

/// Two grants of the same key, the first expired before the second: fences with increasing
/// tokens and different owners, as a paused client and its successor would hold.
async fn successive_fences(backend: &dyn LockBackend, key: &LockKey) -> (Fence, Fence) {
    let old = grant(backend, key, SHORT_TTL).await;
    assert!(backend.release(&old).await.unwrap());
    let new = grant(backend, key, LONG_TTL).await;
    assert!(new.token > old.token, "token did not increase");
    backend.release(&new).await.unwrap();
    (old.fence(), new.fence())
}

fn assert_stale(result: Result<impl std::fmt::Debug, Error>, presented: Fence, current: Fence) {
    match result {
        Err(Error::Stale {
            presented: p,
            current: c,
            ..
        }) => {
            assert_eq!(p, presented, "Stale reports the wrong presented fence");
            assert_eq!(c, current, "Stale reports the wrong current fence");
        }
        other => panic!(
            "expected Error::Stale (presented {presented}, current {current}), got {other:?}"
        ),
    }
}

async fn peek(storage: &dyn FencedStorage, resource: &LockKey) -> Option<Snapshot> {
    storage.peek(resource).await.expect("peek failed")
}

/// Grant, contention, release, and a re-grant with a higher token and a new owner.
pub async fn grant_contend_release(s: &Setup) {
    let b = &*s.backend;
    let key = key("grant");
    let first = grant(b, &key, LONG_TTL).await;
    assert!(
        b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
        "a held lock was granted twice"
    );
    assert!(
        first.is_valid(),
        "a fresh lease is already past valid_until"
    );
    assert!(
        first.valid_until <= Instant::now() + LONG_TTL,
        "valid_until is later than the ttl allows"
    );
    assert!(
        b.release(&first).await.unwrap(),
        "release of a held lease returned false"
    );
    let second = grant(b, &key, LONG_TTL).await;
    assert!(
        second.token > first.token,
        "re-grant did not raise the token"
    );
    assert_ne!(second.owner, first.owner, "two grants share an owner id");
    assert!(b.release(&second).await.unwrap());
}

/// Tokens strictly increase over 1,000 grants of one key.
pub async fn tokens_increase_over_1000_grants(s: &Setup) {
    let b = &*s.backend;
    let key = key("thousand");
    let mut last: Option<FencingToken> = None;
    for round in 0..1000 {
        let lease = grant(b, &key, LONG_TTL).await;
        if let Some(last) = last {
            assert!(
                lease.token > last,
                "grant {round}: token {} after {last}",
                lease.token
            );
        }
        last = Some(lease.token);
        assert!(b.release(&lease).await.unwrap());
    }
}

/// No token is handed out twice, whether the previous lease was released, expired, or the
/// counter was advanced.
pub async fn tokens_never_reused_after_release_expiry_or_advance(s: &Setup) {
    let b = &*s.backend;
    let key = key("reuse");
    let mut seen = HashSet::new();
    let mut last = 0u64;
    let mut note = |token: FencingToken, how: &str| {
        assert!(seen.insert(token), "token {token} reused after {how}");
        assert!(
            token.get() > last,
            "token {token} not above {last} after {how}"
        );
        last = token.get();
    };
    let released = grant(b, &key, LONG_TTL).await;
    note(released.token, "first grant");
    b.release(&released).await.unwrap();
    let expired = grant(b, &key, SHORT_TTL).await;
    note(expired.token, "release");
    sleep(PAST_SHORT_TTL).await;
    let after_expiry = grant(b, &key, LONG_TTL).await;
    note(after_expiry.token, "expiry");
    b.release(&after_expiry).await.unwrap();
    let floor = FencingToken::new(after_expiry.token.get() + 10).unwrap();
    b.advance_token(&key, floor).await.unwrap();
    let advanced = grant(b, &key, LONG_TTL).await;
    assert!(
        advanced.token > floor,
        "grant after advance_token is not above the floor"
    );
    note(advanced.token, "advance_token");
    b.release(&advanced).await.unwrap();
}

/// `advance_token` raises the next grant past the floor and never lowers the counter.
pub async fn advance_token_raises_next_grant(s: &Setup) {
    let b = &*s.backend;
    let key = key("advance");
    let first = grant(b, &key, LONG_TTL).await;
    b.release(&first).await.unwrap();
    let floor = FencingToken::new(first.token.get() + 1000).unwrap();
    let counter = b.advance_token(&key, floor).await.unwrap();
    assert!(
        counter >= floor,
        "advance_token returned {counter} below floor {floor}"
    );
    let lowered = b.advance_token(&key, FencingToken::MIN).await.unwrap();
    assert!(
        lowered >= counter,
        "advance_token lowered the counter to {lowered}"
    );
    let next = grant(b, &key, LONG_TTL).await;
    assert!(
        next.token > floor,
        "next grant {} not above floor {floor}",
        next.token
    );
    b.release(&next).await.unwrap();
    // On a key never used, advance_token starts the counter.
    let fresh = self::key("advance-fresh");
    let floor = FencingToken::new(77).unwrap();
    assert!(b.advance_token(&fresh, floor).await.unwrap() >= floor);
    let lease = grant(b, &fresh, LONG_TTL).await;
    assert!(lease.token > floor);
    b.release(&lease).await.unwrap();
}

/// An expired lease no longer blocks: the next client is granted, with a higher token.
pub async fn expiry_hands_over(s: &Setup) {
    let b = &*s.backend;
    let key = key("expiry");
    let old = grant(b, &key, SHORT_TTL).await;
    assert!(
        b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
        "held lock granted before expiry"
    );
    sleep(PAST_SHORT_TTL).await;
    assert!(!old.is_valid(), "valid_until is later than the ttl");
    let new = grant(b, &key, LONG_TTL).await;
    assert!(new.token > old.token);
    b.release(&new).await.unwrap();
}

/// Extend keeps owner and token, moves `valid_until` forward, and keeps the lock past the
/// original ttl.
pub async fn extend_keeps_lease_and_token(s: &Setup) {
    let b = &*s.backend;
    let key = key("extend");
    let lease = grant(b, &key, SHORT_TTL).await;
    sleep(SHORT_TTL / 3).await;
    let extended = b.extend(&lease, Duration::from_secs(5)).await.unwrap();
    assert_eq!(extended.token, lease.token, "extend changed the token");
    assert_eq!(extended.owner, lease.owner, "extend changed the owner");
    assert_eq!(extended.key, lease.key);
    assert!(
        extended.valid_until > lease.valid_until,
        "extend did not move valid_until"
    );
    sleep(PAST_SHORT_TTL).await;
    assert!(
        b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
        "extended lock was granted to another client"
    );
    assert!(b.release(&extended).await.unwrap());
}

/// Extending a lease whose lock was taken over is `LeaseLost` and leaves the new holder alone.
pub async fn extend_after_takeover_is_lease_lost(s: &Setup) {
    let b = &*s.backend;
    let key = key("takeover");
    let old = grant(b, &key, SHORT_TTL).await;
    sleep(PAST_SHORT_TTL).await;
    let new = grant(b, &key, LONG_TTL).await;
    match b.extend(&old, LONG_TTL).await {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("extend after takeover: expected LeaseLost, got {other:?}"),
    }
    let info = b.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder,
        Some(new.fence()),
        "extend disturbed the new holder"
    );
    assert!(b.try_acquire(&key, LONG_TTL).await.unwrap().is_none());
    assert!(b.release(&new).await.unwrap());
    // Extending a lease that was released does not re-create the lock.
    match b.extend(&new, LONG_TTL).await {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("extend after release: expected LeaseLost, got {other:?}"),
    }
    let info = b.inspect(&key).await.unwrap();
    assert_eq!(info.holder, None, "extend re-created a released lock");
}

/// Releasing a superseded lease is a no-op: it returns false and the new holder keeps the lock.
pub async fn stale_release_is_a_noop(s: &Setup) {
    let b = &*s.backend;
    let key = key("stale-release");
    let old = grant(b, &key, SHORT_TTL).await;
    sleep(PAST_SHORT_TTL).await;
    let new = grant(b, &key, LONG_TTL).await;
    assert!(
        !b.release(&old).await.unwrap(),
        "stale release returned true"
    );
    assert!(
        b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
        "stale release freed another owner's lock"
    );
    assert_eq!(b.inspect(&key).await.unwrap().holder, Some(new.fence()));
    assert!(b.release(&new).await.unwrap());
}

/// The second release of a lease returns false and changes nothing.
pub async fn double_release(s: &Setup) {
    let b = &*s.backend;
    let key = key("double-release");
    let lease = grant(b, &key, LONG_TTL).await;
    assert!(b.release(&lease).await.unwrap());
    assert!(
        !b.release(&lease).await.unwrap(),
        "second release returned true"
    );
    let next = grant(b, &key, LONG_TTL).await;
    assert!(
        !b.release(&lease).await.unwrap(),
        "old lease released the new holder"
    );
    assert!(b.try_acquire(&key, LONG_TTL).await.unwrap().is_none());
    assert!(b.release(&next).await.unwrap());
}

/// `inspect` reports the holder's fence, its remaining time and the last token.
pub async fn inspect_reports_holder_and_token(s: &Setup) {
    let b = &*s.backend;
    let key = key("inspect");
    let empty = b.inspect(&key).await.unwrap();
    assert_eq!(empty.key, key);
    assert_eq!(empty.holder, None);
    assert_eq!(empty.last_token, None, "a never-used key reports a token");
    let lease = grant(b, &key, LONG_TTL).await;
    let held = b.inspect(&key).await.unwrap();
    assert_eq!(held.holder, Some(lease.fence()));
    let remaining = held
        .remaining
        .expect("a held lock reports its remaining time");
    assert!(
        remaining > Duration::ZERO && remaining <= LONG_TTL,
        "remaining {remaining:?}"
    );
    assert_eq!(held.last_token, Some(lease.token));
    b.release(&lease).await.unwrap();
    let free = b.inspect(&key).await.unwrap();
    assert_eq!(free.holder, None);
    assert_eq!(
        free.last_token,
        Some(lease.token),
        "release forgot the token"
    );
}

/// A waiting request gets the lock once the holder releases it, with a higher token.
pub async fn waiter_gets_lock_after_release(s: &Setup) {
    let b = &*s.backend;
    let key = key("waiter");
    let held = grant(b, &key, LONG_TTL).await;
    let locker = Locker::new(s.backend.clone());
    let waiter = tokio::spawn(
        locker
            .lock(key.as_str())
            .ttl(LONG_TTL)
            .wait(PATIENCE * 2)
            .into_future(),
    );
    sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "waiter got a held lock");
    assert!(b.release(&held).await.unwrap());
    let guard = timeout(PATIENCE, waiter)
        .await
        .expect("waiter not woken within 10 s of the release")
        .unwrap()
        .expect("waiter failed");
    assert!(guard.token() > held.token);
    assert!(guard.release().await.unwrap());
}

/// A request whose wait budget runs out fails with `Timeout`, after about the budget.
pub async fn wait_budget_spent_is_timeout(s: &Setup) {
    let b = &*s.backend;
    let key = key("timeout");
    let held = grant(b, &key, LONG_TTL).await;
    let locker = Locker::new(s.backend.clone());
    let started = Instant::now();
    let budget = Duration::from_millis(300);
    match locker.lock(key.as_str()).ttl(LONG_TTL).wait(budget).await {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(
        started.elapsed() >= budget,
        "gave up before the budget was spent"
    );
    assert!(locker.try_lock(key.as_str()).await.unwrap().is_none());
    assert!(b.release(&held).await.unwrap());
}

/// Acquire futures dropped at any point leave no lock past its ttl.
pub async fn dropped_acquire_future_leaves_no_lock_beyond_ttl(s: &Setup) {
    let b = &*s.backend;
    let locker = Locker::new(s.backend.clone());
    let key = key("dropped-future");
    // A waiting request, dropped while the lock is held.
    let held = grant(b, &key, LONG_TTL).await;
    let waiting = locker
        .lock(key.as_str())
        .ttl(SHORT_TTL)
        .wait(PATIENCE)
        .watchdog(false);
    assert!(timeout(Duration::from_millis(100), waiting).await.is_err());
    assert!(b.release(&held).await.unwrap());
    // Uncontended requests dropped after ever longer times: mid-flight or right after.
    for micros in [0u64, 50, 200, 1_000, 5_000] {
        let request = locker
            .lock(key.as_str())
            .ttl(SHORT_TTL)
            .wait(PATIENCE)
            .watchdog(false);
        let outcome = timeout(Duration::from_micros(micros), request).await;
        drop(outcome);
        sleep(PAST_SHORT_TTL).await;
        let lease = b
            .try_acquire(&key, LONG_TTL)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("lock left held past its ttl after dropping at {micros} us"));
        assert!(b.release(&lease).await.unwrap());
    }
}

/// Dropping a guard releases the lock long before its ttl.
pub async fn dropped_guard_releases(s: &Setup) {
    let b = &*s.backend;
    let locker = Locker::new(s.backend.clone());
    let key = key("dropped-guard");
    let guard = locker.lock(key.as_str()).ttl(LONG_TTL).await.unwrap();
    let token = guard.token();
    drop(guard);
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(lease) = b.try_acquire(&key, LONG_TTL).await.unwrap() {
            assert!(lease.token > token);
            b.release(&lease).await.unwrap();
            break;
        }
        assert!(
            Instant::now() < deadline,
            "dropped guard did not release within 10 s"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// The watchdog keeps the lock past three ttls; nobody else gets it meanwhile.
pub async fn watchdog_keeps_lock_past_three_ttls(s: &Setup) {
    let b = &*s.backend;
    let locker = Locker::new(s.backend.clone());
    let key = key("watchdog");
    let ttl = Duration::from_millis(600);
    let guard = locker.lock(key.as_str()).ttl(ttl).await.unwrap();
    let lost = guard.lost_token();
    let held_until = Instant::now() + ttl * 3 + ttl / 2;
    while Instant::now() < held_until {
        assert!(
            b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
            "another client got a lock the watchdog should keep"
        );
        sleep(ttl / 4).await;
    }
    assert!(
        !lost.is_cancelled(),
        "lost() fired while the watchdog renewed"
    );
    assert!(guard.is_held());
    assert_eq!(b.inspect(&key).await.unwrap().holder, Some(guard.fence()));
    assert!(guard.release().await.unwrap());
}

/// Without renewal, `lost()` fires at the deadline; after a takeover, extend is `LeaseLost`.
pub async fn lost_fires_when_lease_is_taken_over(s: &Setup) {
    let b = &*s.backend;
    let locker = Locker::new(s.backend.clone());
    let key = key("lost-takeover");
    let guard = locker
        .lock(key.as_str())
        .ttl(SHORT_TTL)
        .watchdog(false)
        .await
        .unwrap();
    let reason = timeout(PATIENCE, guard.lost())
        .await
        .expect("lost() did not fire");
    assert_eq!(reason, LostReason::DeadlinePassed);
    assert!(!guard.is_held());
    sleep(PAST_SHORT_TTL).await;
    let new = grant(b, &key, LONG_TTL).await;
    assert!(matches!(
        guard.extend(SHORT_TTL).await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(
        !guard.release().await.unwrap(),
        "a lost guard released the new holder"
    );
    assert!(b.release(&new).await.unwrap());
}

/// N tasks x M rounds of fenced read-modify-write on one counter end exactly at N x M, and no
/// two valid leases overlap in time.
pub async fn counter_increments_are_exact(s: &Setup) {
    const TASKS: usize = 4;
    const ROUNDS: usize = 25;
    let locker = Locker::new(s.backend.clone());
    let key = key("counter");
    let intervals = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (locker, key, storage, intervals) = (
            locker.clone(),
            key.clone(),
            s.storage.clone(),
            intervals.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locker
                    .lock(key.as_str())
                    .ttl(LONG_TTL)
                    .wait(PATIENCE * 6)
                    .await
                    .unwrap();
                let start = Instant::now();
                let fence = guard.fence();
                let value = storage.read(&key, fence).await.unwrap();
                let n: u64 = value.map_or(0, |v| String::from_utf8(v).unwrap().parse().unwrap());
                storage
                    .write(&key, fence, (n + 1).to_string().as_bytes())
                    .await
                    .unwrap();
                let end = Instant::now().min(guard.lease().valid_until);
                intervals.lock().unwrap().push((start, end));
                assert!(guard.release().await.unwrap());
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let snapshot = peek(&*s.storage, &key).await.expect("counter missing");
    let total: usize = String::from_utf8(snapshot.value.unwrap())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(total, TASKS * ROUNDS, "lost or duplicated increments");
    let mut intervals = intervals.lock().unwrap().clone();
    intervals.sort();
    for pair in intervals.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "two valid leases overlapped");
    }
}

/// The story of DESIGN section 1: a client pauses past its ttl, another takes the lock and
/// writes, the first wakes and writes: its write is refused and the data stays the second's.
pub async fn paused_client_is_refused(s: &Setup) {
    let (b, st) = (&*s.backend, &*s.storage);
    let key = key("paused");
    let first = grant(b, &key, SHORT_TTL).await;
    assert_eq!(st.read(&key, first.fence()).await.unwrap(), None);
    sleep(PAST_SHORT_TTL).await; // the pause
    let second = grant(b, &key, LONG_TTL).await;
    st.read(&key, second.fence()).await.unwrap();
    st.write(&key, second.fence(), b"second").await.unwrap();
    assert_stale(
        st.write(&key, first.fence(), b"first").await,
        first.fence(),
        second.fence(),
    );
    let snapshot = peek(st, &key).await.unwrap();
    assert_eq!(snapshot.value.as_deref(), Some(&b"second"[..]));
    assert_eq!(snapshot.fence, second.fence());
    b.release(&second).await.unwrap();
}

/// A newer token is admitted and becomes the resource's fence.
pub async fn storage_admits_newer_token(s: &Setup) {
    let st = &*s.storage;
    let key = key("newer");
    let (old, new) = successive_fences(&*s.backend, &key).await;
    st.write(&key, old, b"old").await.unwrap();
    st.write(&key, new, b"new").await.unwrap();
    let snapshot = peek(st, &key).await.unwrap();
    assert_eq!(
        snapshot,
        Snapshot {
            value: Some(b"new".to_vec()),
            fence: new
        }
    );
}

/// An older token is refused, for reads and writes.
pub async fn storage_refuses_older_token(s: &Setup) {
    let st = &*s.storage;
    let key = key("older");
    let (old, new) = successive_fences(&*s.backend, &key).await;
    st.write(&key, new, b"new").await.unwrap();
    assert_stale(st.write(&key, old, b"old").await, old, new);
    assert_stale(st.read(&key, old).await, old, new);
}

/// The same fence is admitted again and again: read, write, write, read.
pub async fn storage_admits_same_token_same_owner(s: &Setup) {
    let st = &*s.storage;
    let key = key("same");
    let (_, fence) = successive_fences(&*s.backend, &key).await;
    assert_eq!(st.read(&key, fence).await.unwrap(), None);
    st.write(&key, fence, b"1").await.unwrap();
    st.write(&key, fence, b"2").await.unwrap();
    assert_eq!(
        st.read(&key, fence).await.unwrap().as_deref(),
        Some(&b"2"[..])
    );
}

/// The same token from another owner is refused: equal tokens only pass for their owner.
pub async fn storage_refuses_equal_token_other_owner(s: &Setup) {
    let st = &*s.storage;
    let key = key("equal");
    let (_, fence) = successive_fences(&*s.backend, &key).await;
    st.write(&key, fence, b"mine").await.unwrap();
    let impostor = Fence::new(fence.token, OwnerId::random());
    assert_stale(st.write(&key, impostor, b"theirs").await, impostor, fence);
    assert_stale(st.read(&key, impostor).await, impostor, fence);
}

/// Fenced reads close the lost-update window: A reads, B reads, A's write is refused.
pub async fn fenced_reads_prevent_lost_update(s: &Setup) {
    let st = &*s.storage;
    let key = key("lost-update");
    let (a, b) = successive_fences(&*s.backend, &key).await;
    st.read(&key, a).await.unwrap();
    st.read(&key, b).await.unwrap();
    assert_stale(st.write(&key, a, b"a").await, a, b);
    st.write(&key, b, b"b").await.unwrap();
    assert_eq!(
        peek(st, &key).await.unwrap().value.as_deref(),
        Some(&b"b"[..])
    );
}

/// A fenced read of a resource without a value still records the fence.
pub async fn fenced_read_of_empty_resource_records_fence(s: &Setup) {
    let st = &*s.storage;
    let key = key("empty-read");
    let (old, new) = successive_fences(&*s.backend, &key).await;
    assert_eq!(peek(st, &key).await, None);
    assert_eq!(st.read(&key, new).await.unwrap(), None);
    assert_eq!(
        peek(st, &key).await,
        Some(Snapshot {
            value: None,
            fence: new
        }),
        "the fenced read did not record its fence"
    );
    assert_stale(st.write(&key, old, b"old").await, old, new);
}

/// A refused operation leaves value and fence exactly as they were.
pub async fn refused_operation_changes_nothing(s: &Setup) {
    let st = &*s.storage;
    let key = key("unchanged");
    let (old, new) = successive_fences(&*s.backend, &key).await;
    st.write(&key, new, b"kept").await.unwrap();
    let before = peek(st, &key).await;
    assert!(st.write(&key, old, b"overwritten").await.is_err());
    assert!(st.read(&key, old).await.is_err());
    let impostor = Fence::new(new.token, OwnerId::random());
    assert!(st.write(&key, impostor, b"overwritten").await.is_err());
    assert_eq!(
        peek(st, &key).await,
        before,
        "a refused operation changed the resource"
    );
}

/// Values from 0 bytes to 1 MiB, with every byte value, round-trip unchanged.
pub async fn values_from_empty_to_one_mib(s: &Setup) {
    let st = &*s.storage;
    let key = key("values");
    let (_, fence) = successive_fences(&*s.backend, &key).await;
    for len in [0usize, 1, 2, 255, 256, 4096, 65_537, 1 << 20] {
        let value: Vec<u8> = (0..len).map(|i| (i * 31 % 256) as u8).collect();
        st.write(&key, fence, &value).await.unwrap();
        assert_eq!(
            st.read(&key, fence).await.unwrap().as_deref(),
            Some(&value[..]),
            "len {len}"
        );
        assert_eq!(
            peek(st, &key).await.unwrap().value.as_deref(),
            Some(&value[..])
        );
    }
}

/// A value over the storage's maximum is `ValueTooLarge` and changes nothing.
pub async fn oversized_value_is_refused(s: &Setup) {
    let st = &*s.storage;
    let key = key("oversized");
    let (_, fence) = successive_fences(&*s.backend, &key).await;
    let max = st.max_value_len();
    assert!(max >= 1 << 20, "the storage must accept at least 1 MiB");
    assert!(
        max <= 1 << 30,
        "max_value_len {max} is larger than any test can allocate"
    );
    match st.write(&key, fence, &vec![7u8; max + 1]).await {
        Err(Error::ValueTooLarge { size, max: m }) => assert_eq!((size, m), (max + 1, max)),
        other => panic!("expected ValueTooLarge, got {other:?}"),
    }
    assert_eq!(
        peek(st, &key).await,
        None,
        "a refused write changed the resource"
    );
}

/// Empty, overlong and control-character keys are `InvalidKey` before any backend call.
pub async fn bad_keys_are_refused(s: &Setup) {
    let locker = Locker::new(s.backend.clone());
    let long = "k".repeat(LockKey::MAX_LEN + 1);
    for bad in [
        "",
        "nul\0inside",
        "tab\tinside",
        "line\nbreak",
        "bell\u{7}",
        long.as_str(),
    ] {
        assert!(
            matches!(LockKey::new(bad), Err(Error::InvalidKey { .. })),
            "LockKey accepted {bad:?}"
        );
        match locker.lock(bad).wait(Duration::ZERO).await {
            Err(Error::InvalidKey { .. }) => {}
            other => panic!("locker accepted bad key {bad:?}: {other:?}"),
        }
    }
    assert!(matches!(
        LockKey::from_bytes(b"\xff\xfe"),
        Err(Error::InvalidKey { .. })
    ));
}

/// Keys with braces, quotes, spaces, Unicode and the full 512 bytes work and stay distinct.
pub async fn unusual_keys_round_trip(s: &Setup) {
    let (b, st) = (&*s.backend, &*s.storage);
    let tag = OwnerId::random().to_string();
    let mut names = vec![
        format!("{{{tag}}}"),
        format!("{tag}}}{{"),
        format!("{tag}:{{x}}:lock"),
        format!("quote\"s and 'apostrophes' {tag}"),
        format!("with spaces {tag}"),
        format!("ünïcødé ✓ 🔒 {tag}"),
        format!("percent%s and \\backslash {tag}"),
    ];
    let pad = LockKey::MAX_LEN - tag.len();
    names.push(format!("{tag}{}", "x".repeat(pad)));
    names.push(format!("{tag}{}", "€".repeat(pad / 3)));
    let mut leases = Vec::new();
    for name in &names {
        let key = LockKey::new(name).unwrap();
        let lease = grant(b, &key, LONG_TTL).await;
        let info = b.inspect(&key).await.unwrap();
        assert_eq!(
            info.holder,
            Some(lease.fence()),
            "inspect lost key {name:?}"
        );
        st.write(&key, lease.fence(), name.as_bytes())
            .await
            .unwrap();
        leases.push(lease);
    }
    for (name, lease) in names.iter().zip(&leases) {
        let snapshot = peek(st, &lease.key).await.unwrap();
        assert_eq!(
            snapshot.value.as_deref(),
            Some(name.as_bytes()),
            "keys collided"
        );
        assert!(
            b.release(lease).await.unwrap(),
            "release failed for {name:?}"
        );
    }
}

/// Zero, sub-millisecond and too-long ttls are `InvalidTtl` and change nothing.
pub async fn bad_ttls_are_refused_and_change_nothing(s: &Setup) {
    let b = &*s.backend;
    let key = key("bad-ttl");
    let max = b.capabilities().max_ttl;
    let bad = [
        Duration::ZERO,
        Duration::from_micros(500),
        max + Duration::from_millis(1),
        Duration::MAX,
    ];
    for ttl in bad {
        match b.try_acquire(&key, ttl).await {
            Err(Error::InvalidTtl { .. }) => {}
            other => panic!("try_acquire with ttl {ttl:?}: expected InvalidTtl, got {other:?}"),
        }
    }
    let untouched = b.inspect(&key).await.unwrap();
    assert_eq!(
        (untouched.holder, untouched.last_token),
        (None, None),
        "a refused ttl touched the key"
    );
    let lease = grant(b, &key, LONG_TTL).await;
    for ttl in bad {
        match b.extend(&lease, ttl).await {
            Err(Error::InvalidTtl { .. }) => {}
            other => panic!("extend with ttl {ttl:?}: expected InvalidTtl, got {other:?}"),
        }
    }
    let locker = Locker::new(s.backend.clone());
    assert!(matches!(
        locker.lock(key.as_str()).ttl(Duration::ZERO).await,
        Err(Error::InvalidTtl { .. })
    ));
    let info = b.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder,
        Some(lease.fence()),
        "a refused extend changed the lease"
    );
    assert_eq!(info.last_token, Some(lease.token));
    assert!(b.release(&lease).await.unwrap());
}

/// A wait budget that overflows the clock is `InvalidConfig` and takes no lock.
pub async fn wait_budget_overflow_is_refused(s: &Setup) {
    let locker = Locker::new(s.backend.clone());
    let key = key("overflow");
    match locker.lock(key.as_str()).wait(Duration::MAX).await {
        Err(Error::InvalidConfig { .. }) => {}
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let info = s.backend.inspect(&key).await.unwrap();
    assert_eq!((info.holder, info.last_token), (None, None));
}

/// When the backend goes away, a guard's `lost()` fires by the lease's deadline.
pub async fn lost_fires_when_backend_goes_away(s: &Setup) {
    let locker = Locker::new(s.backend.clone());
    let key = key("outage");
    let ttl = Duration::from_secs(1);
    let guard = locker.lock(key.as_str()).ttl(ttl).await.unwrap();
    (s.outage)().await;
    let valid_until = guard.lease().valid_until;
    let reason = timeout(PATIENCE, guard.lost())
        .await
        .expect("lost() did not fire after the backend went away");
    assert!(
        Instant::now() <= valid_until + ttl,
        "lost() fired ({reason}) long after the lease's deadline"
    );
    assert!(!guard.is_held());
}
