//! What an application sees through `Locker::lock` and the guard it returns, on top of the
//! backend under test.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock_core::{Error, Locker, LostReason, QueueRole, WakeUp};
use tokio::time::{Instant, sleep, timeout};

use super::support::{not_applicable, 
    LONG_TTL, PATIENCE, grant, grant_after_expiry, grant_within_patience, key, peek,
    spawn_barging, spawn_waiter,
};
use crate::{CountingTries, Setup};

declare_properties!(__fencelock_conformance_locker, {
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
        assert!(
            b.release(&held).await.unwrap(),
            "release of the holder's lease answered false (not held)"
        );
        let guard = timeout(PATIENCE, waiter)
            .await
            .expect("waiter not woken within 10 s of the release")
            .unwrap()
            .expect("waiter failed");
        assert!(
            guard.token() > held.token,
            "the waiter's token {} is not above the released holder's {}",
            guard.token(),
            held.token
        );
        assert!(
            guard.release().await.unwrap(),
            "release of the waiter's guard answered false (not held)"
        );
    }

    /// A backend whose capabilities claim notify wake-ups wakes a waiter in
    /// `wait_for_release` when the lock is released, not when the wait's `max` runs out: a
    /// backend that claims it while sleeping out `max` (polling) makes every waiter of a
    /// `Locker` late by its backoff. Returning early is allowed (a wake-up is a hint); the
    /// waiter calls again until the lock is free.
    pub async fn notify_wake_up_comes_with_the_release(s: &Setup) {
        if s.backend.capabilities().wake_up != WakeUp::Notify {
            return not_applicable("notify_wake_up_comes_with_the_release", "the backend does not claim WakeUp::Notify");
        }
        let b = &*s.backend;
        let key = key("notify");
        let held = grant(b, &key, LONG_TTL).await;
        let waiter = {
            let (backend, key) = (s.backend.clone(), key.clone());
            tokio::spawn(async move {
                loop {
                    backend.wait_for_release(&key, LONG_TTL).await.unwrap();
                    if backend.inspect(&key).await.unwrap().holder.is_none() {
                        return;
                    }
                }
            })
        };
        // Time for the waiter to subscribe before the release it must hear.
        sleep(Duration::from_millis(500)).await;
        assert!(
            b.release(&held).await.unwrap(),
            "release of the holder's lease answered false (not held)"
        );
        timeout(PATIENCE, waiter)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} claims notify wake-ups, but a waiter in wait_for_release(max = {LONG_TTL:?}) \
                     was not woken within {PATIENCE:?} of the release",
                    b.name()
                )
            })
            .unwrap();
    }

    /// A backend that claims to be fair hands a released lock to its waiters in the order they
    /// arrived: waiters that queue one after the other behind a holder are granted in that
    /// order.
    pub async fn fair_waiters_are_granted_in_arrival_order(s: &Setup) {
        if !s.backend.capabilities().fair {
            return not_applicable("fair_waiters_are_granted_in_arrival_order", "the backend does not claim fair");
        }
        let b = &*s.backend;
        let key = key("fair");
        let held = grant(b, &key, LONG_TTL).await;
        let locker = Locker::new(s.backend.clone());
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for place in 0..4 {
            let (locker, key, order) = (locker.clone(), key.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let guard = locker
                    .lock(key.as_str())
                    .ttl(LONG_TTL)
                    .wait(PATIENCE * 3)
                    .await
                    .expect("a queued waiter was not granted");
                order.lock().unwrap().push(place);
                sleep(Duration::from_millis(20)).await;
                assert!(
                    guard.release().await.unwrap(),
                    "release of waiter {place}'s guard answered false (not held)"
                );
            }));
            // Each waiter has queued before the next one arrives, even on a loaded machine.
            sleep(Duration::from_millis(400)).await;
        }
        assert!(
            b.release(&held).await.unwrap(),
            "release of the holder's lease answered false (not held)"
        );
        for waiter in waiters {
            timeout(PATIENCE * 4, waiter)
                .await
                .expect("the queued waiters were not all granted")
                .unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            [0, 1, 2, 3],
            "{} claims fairness, but its waiters were granted out of arrival order",
            b.name()
        );
    }

    /// On a backend that claims to be fair, a try that does not queue (`try_acquire`, as a
    /// request with no wait budget sends) never takes a released lock from a queued waiter:
    /// tries sent right after the release are refused, and the waiter is granted.
    pub async fn a_try_does_not_jump_the_queue(s: &Setup) {
        if !s.backend.capabilities().fair {
            return not_applicable("a_try_does_not_jump_the_queue", "the backend does not claim fair");
        }
        let b = &*s.backend;
        let key = key("no-jumping");
        let held = grant(b, &key, LONG_TTL).await;
        let locker = Locker::new(s.backend.clone());
        let waiter = spawn_waiter(&locker, &key);
        // The waiter has queued, even on a loaded machine.
        sleep(Duration::from_millis(400)).await;
        assert!(
            b.release(&held).await.unwrap(),
            "release of the holder's lease answered false (not held)"
        );
        for _ in 0..20 {
            if let Some(jumped) = b.try_acquire(&key, LONG_TTL).await.unwrap() {
                panic!(
                    "{} claims fairness, but a try that did not queue took the lock from a \
                     queued waiter (token {})",
                    b.name(),
                    jumped.token
                );
            }
            if waiter.is_finished() {
                break;
            }
        }
        let guard = timeout(PATIENCE, waiter)
            .await
            .expect("the queued waiter was not granted within 10 s of the release")
            .unwrap()
            .expect("the queued waiter failed");
        assert_eq!(
            b.inspect(&key).await.unwrap().holder,
            Some(guard.fence()),
            "inspect does not name the queued waiter that was granted"
        );
        assert!(
            guard.release().await.unwrap(),
            "release of the queued waiter's guard answered false (not held)"
        );
    }

    /// A waiter whose request was dropped (cancelled) while it waited never ends up holding
    /// the lock, and does not keep it from the waiter behind it for longer than the backend's
    /// place ttl: the next waiter is granted soon after the release.
    pub async fn cancelled_waiter_never_holds_the_lock(s: &Setup) {
        let b = &*s.backend;
        let key = key("cancelled");
        let held = grant(b, &key, LONG_TTL).await;
        let locker = Locker::new(s.backend.clone());
        let cancelled = spawn_waiter(&locker, &key);
        sleep(Duration::from_millis(400)).await;
        cancelled.abort();
        assert!(
            cancelled.await.is_err_and(|e| e.is_cancelled()),
            "the waiter to cancel got a held lock"
        );
        let next = spawn_waiter(&locker, &key);
        sleep(Duration::from_millis(400)).await;
        assert!(
            b.release(&held).await.unwrap(),
            "release of the holder's lease answered false (not held)"
        );
        let guard = timeout(PATIENCE, next)
            .await
            .expect("the waiter behind a cancelled one was not granted within 10 s of the release")
            .unwrap()
            .expect("the waiter behind a cancelled one failed");
        assert_eq!(
            b.inspect(&key).await.unwrap().holder,
            Some(guard.fence()),
            "the lock is held by someone other than the waiter that was granted"
        );
        assert!(
            guard.release().await.unwrap(),
            "release of the granted waiter's guard answered false (not held)"
        );
    }

    /// A request that barges (`fair(false)`) keeps no place in the key's queue, is granted
    /// after the release, and one cancelled while it waited never ends up holding the lock.
    pub async fn a_barging_waiter_keeps_no_place_and_is_granted(s: &Setup) {
        let b = &*s.backend;
        let key = key("barging");
        let held = grant(b, &key, LONG_TTL).await;
        let locker = Locker::new(s.backend.clone());
        let cancelled = spawn_barging(&locker, &key);
        let waiter = spawn_barging(&locker, &key);
        sleep(Duration::from_millis(400)).await;
        if let Some(queue) = b.inspect_queue(&key).await.unwrap() {
            assert!(
                queue.iter().all(|entry| entry.role != QueueRole::Waiting),
                "{}: a barging request took a place in the queue: {queue:?}",
                b.name()
            );
        }
        cancelled.abort();
        assert!(
            cancelled.await.is_err_and(|e| e.is_cancelled()),
            "the barging waiter to cancel got a held lock"
        );
        assert!(
            b.release(&held).await.unwrap(),
            "release of the holder's lease answered false (not held)"
        );
        let guard = timeout(PATIENCE, waiter)
            .await
            .expect("the barging waiter was not granted within 10 s of the release")
            .unwrap()
            .expect("the barging waiter failed");
        assert!(
            guard.token() > held.token,
            "the barging waiter's token {} is not above the released holder's {}",
            guard.token(),
            held.token
        );
        assert_eq!(
            b.inspect(&key).await.unwrap().holder,
            Some(guard.fence()),
            "the lock is held by someone other than the barging waiter that was granted"
        );
        assert!(
            guard.release().await.unwrap(),
            "release of the barging waiter's guard answered false (not held)"
        );
    }

    /// On a backend that queues, a barging request never takes a free lock a queued fair
    /// request waits for: the fair one, there first, is granted first.
    pub async fn a_barging_waiter_never_passes_a_queued_one(s: &Setup) {
        if !s.backend.capabilities().fair {
            return not_applicable("a_barging_waiter_never_passes_a_queued_one", "the backend does not claim fair");
        }
        let b = &*s.backend;
        let key = key("barging-behind");
        let held = grant(b, &key, LONG_TTL).await;
        let locker = Locker::new(s.backend.clone());
        let fair = spawn_waiter(&locker, &key);
        sleep(Duration::from_millis(400)).await;
        let barging = spawn_barging(&locker, &key);
        sleep(Duration::from_millis(400)).await;
        assert!(
            b.release(&held).await.unwrap(),
            "release of the holder's lease answered false (not held)"
        );
        let first = timeout(PATIENCE, fair)
            .await
            .expect("the queued fair waiter was not granted within 10 s of the release")
            .unwrap()
            .expect("the queued fair waiter failed");
        assert!(
            !barging.is_finished(),
            "{}: a barging request was granted while the queued fair one held the lock",
            b.name()
        );
        assert_eq!(
            b.inspect(&key).await.unwrap().holder,
            Some(first.fence()),
            "inspect does not name the fair waiter that was granted"
        );
        let first_token = first.token();
        assert!(
            first.release().await.unwrap(),
            "release of the fair waiter's guard answered false (not held)"
        );
        let second = timeout(PATIENCE, barging)
            .await
            .expect("the barging waiter was not granted within 10 s of the fair one's release")
            .unwrap()
            .expect("the barging waiter failed");
        assert!(
            second.token() > first_token,
            "the barging waiter's token {} is not above the fair one's {first_token}",
            second.token()
        );
        assert!(
            second.release().await.unwrap(),
            "release of the barging waiter's guard answered false (not held)"
        );
    }

    /// A waiter granted when the holder releases holds the lock for its whole ttl, however
    /// the backend handed it over (a release that grants the next waiter itself does so for a
    /// short hand-off ttl until the waiter renews it): without the watchdog, the guard's
    /// deadline is about a ttl after the grant.
    pub async fn waiter_granted_at_a_release_holds_its_whole_ttl(s: &Setup) {
        let b = &*s.backend;
        let key = key("handed-ttl");
        let held = grant(b, &key, LONG_TTL).await;
        let locker = Locker::new(s.backend.clone());
        let waiter = tokio::spawn(
            locker
                .lock(key.as_str())
                .ttl(LONG_TTL)
                .wait(PATIENCE * 3)
                .watchdog(false)
                .into_future(),
        );
        sleep(Duration::from_millis(300)).await;
        assert!(
            b.release(&held).await.unwrap(),
            "release of the holder's lease answered false (not held)"
        );
        let guard = timeout(PATIENCE, waiter)
            .await
            .expect("the waiter was not granted within 10 s of the release")
            .unwrap()
            .expect("the waiter failed");
        let left = guard.lease().remaining();
        assert!(
            left > LONG_TTL / 2,
            "{} granted a waiter {left:?} of a {LONG_TTL:?} ttl",
            b.name()
        );
        assert_eq!(
            b.inspect(&key).await.unwrap().holder,
            Some(guard.fence()),
            "inspect does not name the waiter granted at the release"
        );
        assert!(
            guard.release().await.unwrap(),
            "release of the waiter's guard answered false (not held)"
        );
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
        assert!(
            locker.try_lock(key.as_str()).await.unwrap().is_none(),
            "a try got a lock still held after a request for it timed out"
        );
        assert!(
            b.release(&held).await.unwrap(),
            "release of the holder's lease answered false (not held)"
        );
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
            .ttl(s.short_ttl())
            .wait(PATIENCE)
            .watchdog(false);
        let early = timeout(Duration::from_millis(100), waiting).await;
        assert!(
            early.is_err(),
            "a request for a held lock did not keep waiting: {early:?}"
        );
        assert!(
            b.release(&held).await.unwrap(),
            "release of the holder's lease answered false (not held)"
        );
        // Uncontended requests dropped after ever longer times: mid-flight or right after.
        for micros in [0u64, 50, 200, 1_000, 5_000] {
            let request = locker
                .lock(key.as_str())
                .ttl(s.short_ttl())
                .wait(PATIENCE)
                .watchdog(false);
            let outcome = timeout(Duration::from_micros(micros), request).await;
            drop(outcome);
            sleep(s.past_short_ttl()).await;
            let lease = grant_within_patience(b, &key, LONG_TTL)
                .await
                .unwrap_or_else(|| {
                    panic!("lock left held {PATIENCE:?} past its ttl after dropping at {micros} us")
                });
            assert!(
                b.release(&lease).await.unwrap(),
                "after a drop at {micros} us, release of a new grant answered false (not held)"
            );
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
        let lease = grant_within_patience(b, &key, LONG_TTL)
            .await
            .expect("dropped guard did not release within 10 s");
        assert!(
            lease.token > token,
            "the grant after a dropped guard has token {}, not above the guard's {token}",
            lease.token
        );
        b.release(&lease).await.unwrap();
    }

    /// The watchdog keeps the lock past three ttls; nobody else gets it meanwhile.
    pub async fn watchdog_keeps_lock_past_three_ttls(s: &Setup) {
        let b = &*s.backend;
        let locker = Locker::new(s.backend.clone());
        let key = key("watchdog");
        // Long enough that a renewal (every third of the ttl) may stall for three seconds on a
        // loaded machine and still land in time: a 3 s ttl, which left two, lost a MySQL lease
        // under a loaded test run. Scaled up on a backend whose shortest ttl is longer.
        let ttl = Duration::from_secs(5).max(s.short_ttl() * 5);
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
        assert!(
            guard.is_held(),
            "the guard says it lost a lock the watchdog renewed"
        );
        assert_eq!(
            b.inspect(&key).await.unwrap().holder,
            Some(guard.fence()),
            "inspect does not name the guard the watchdog kept"
        );
        assert!(
            guard.release().await.unwrap(),
            "release of the guard the watchdog kept answered false (not held)"
        );
    }

    /// Without renewal, `lost()` fires at the deadline; after a takeover, extend is `LeaseLost`.
    pub async fn lost_fires_when_lease_is_taken_over(s: &Setup) {
        let b = &*s.backend;
        let locker = Locker::new(s.backend.clone());
        let key = key("lost-takeover");
        let guard = locker
            .lock(key.as_str())
            .ttl(s.short_ttl())
            .watchdog(false)
            .await
            .unwrap();
        let reason = timeout(PATIENCE, guard.lost())
            .await
            .expect("lost() did not fire");
        assert_eq!(
            reason,
            LostReason::DeadlinePassed,
            "lost() fired for another reason than the passed deadline"
        );
        assert!(
            !guard.is_held(),
            "the guard says it holds after lost() fired"
        );
        sleep(s.past_short_ttl()).await;
        let new = grant_after_expiry(b, &key, LONG_TTL).await;
        let extended = guard.extend(s.short_ttl()).await;
        assert!(
            matches!(extended, Err(Error::LeaseLost { .. })),
            "extend of a guard taken over answered {extended:?}, not LeaseLost"
        );
        assert!(
            !guard.release().await.unwrap(),
            "a lost guard released the new holder"
        );
        assert!(
            b.release(&new).await.unwrap(),
            "release of the new holder's lease answered false (not held)"
        );
    }

    /// When the backend goes away, a guard's `lost()` fires by the lease's deadline.
    pub async fn lost_fires_when_backend_goes_away(s: &Setup) {
        let locker = Locker::new(s.backend.clone());
        let key = key("outage");
        let ttl = Duration::from_secs(1).max(s.short_ttl());
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
        assert!(
            !guard.is_held(),
            "the guard says it holds after lost() fired ({reason})"
        );
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
                    let n: u64 =
                        value.map_or(0, |v| String::from_utf8(v).unwrap().parse().unwrap());
                    storage
                        .write(&key, fence, (n + 1).to_string().as_bytes())
                        .await
                        .unwrap();
                    let end = Instant::now().min(guard.lease().valid_until);
                    intervals.lock().unwrap().push((start, end));
                    assert!(
                        guard.release().await.unwrap(),
                        "release of a counter holder's guard answered false (not held)"
                    );
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

    /// A guard released while a barging request of the same key waits in the same locker
    /// passes the lock to that request in one step, where the backend claims passes: the
    /// waiter is granted with a higher token by the pass, not by a try of its own.
    pub async fn a_release_passes_the_lock_to_a_barging_waiter_of_its_locker(s: &Setup) {
        if !s.backend.capabilities().passes {
            return not_applicable("a_release_passes_the_lock_to_a_barging_waiter_of_its_locker", "the backend does not claim passes");
        }
        let counting = Arc::new(CountingTries::over(s.backend.clone()));
        let locker = Locker::new(counting.clone());
        let key = key("passed");
        let holder = locker.clone().lock(key.as_str()).ttl(LONG_TTL).await.unwrap();
        let held = holder.lease();
        let waiter = spawn_barging(&locker, &key);
        let settled = Instant::now() + PATIENCE;
        while counting.tries() < 2 && Instant::now() < settled {
            sleep(Duration::from_millis(10)).await;
        }
        sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "the barging waiter got a held lock");
        assert!(holder.release().await.unwrap(), "the holder's release answered not held");
        let guard = timeout(PATIENCE, waiter)
            .await
            .expect("the barging waiter was not granted within 10 s of the release")
            .unwrap()
            .expect("the barging waiter failed");
        assert_eq!(
            counting.passes(),
            1,
            "{}: the release did not pass the lock to the waiter",
            s.backend.name()
        );
        assert!(
            guard.token() > held.token,
            "the passed token {} is not above the holder's {}",
            guard.token(),
            held.token
        );
        assert_eq!(
            s.backend.inspect(&key).await.unwrap().holder,
            Some(guard.fence()),
            "inspect does not name the waiter the lock was passed to"
        );
        assert!(
            !s.backend.release(&held).await.unwrap(),
            "the holder's lease was still held after the pass"
        );
        assert!(guard.release().await.unwrap(), "the passed guard was not held");
        assert_eq!(counting.passes(), 1, "a release with nobody waiting passed");
        assert!(
            s.backend.try_acquire(&key, LONG_TTL).await.unwrap().is_some(),
            "the key stayed held after the last release"
        );
    }

    /// A release never passes the lock to a barging waiter of its locker ahead of a fair
    /// request queued for the key: the fair one is granted first.
    pub async fn a_pass_never_goes_ahead_of_a_queued_waiter(s: &Setup) {
        let capabilities = s.backend.capabilities();
        if !(capabilities.passes && capabilities.fair) {
            return not_applicable("a_pass_never_goes_ahead_of_a_queued_waiter", "the backend does not claim both passes and fair");
        }
        let counting = Arc::new(CountingTries::over(s.backend.clone()));
        let locker = Locker::new(counting.clone());
        let key = key("pass-behind");
        let holder = locker.clone().lock(key.as_str()).ttl(LONG_TTL).await.unwrap();
        // The fair request comes from another locker: a process of its own.
        let fair = spawn_waiter(&Locker::new(s.backend.clone()), &key);
        sleep(Duration::from_millis(400)).await;
        let barging = spawn_barging(&locker, &key);
        sleep(Duration::from_millis(400)).await;
        assert!(holder.release().await.unwrap(), "the holder's release answered not held");
        let first = timeout(PATIENCE, fair)
            .await
            .expect("the queued fair waiter was not granted within 10 s of the release")
            .unwrap()
            .expect("the queued fair waiter failed");
        assert_eq!(counting.passes(), 0, "the lock was passed past a queued waiter");
        assert!(
            !barging.is_finished(),
            "{}: a barging request was granted while the queued fair one held the lock",
            s.backend.name()
        );
        assert!(first.release().await.unwrap());
        let second = timeout(PATIENCE, barging)
            .await
            .expect("the barging waiter was not granted within 10 s of the fair one's release")
            .unwrap()
            .expect("the barging waiter failed");
        assert!(second.release().await.unwrap());
    }

    /// A barging request cancelled as a release passes it the lock leaves no lock behind:
    /// the lease passed to it is released, so the key is free at once rather than after the
    /// lease's ttl.
    pub async fn a_pass_to_a_cancelled_waiter_is_released(s: &Setup) {
        if !s.backend.capabilities().passes {
            return not_applicable("a_pass_to_a_cancelled_waiter_is_released", "the backend does not claim passes");
        }
        let counting = Arc::new(CountingTries::over(s.backend.clone()));
        let locker = Locker::new(counting.clone());
        let key = key("pass-cancelled");
        let holder = locker.clone().lock(key.as_str()).ttl(LONG_TTL).await.unwrap();
        let mut waiter = locker
            .lock(key.as_str())
            .ttl(LONG_TTL)
            .wait(PATIENCE * 3)
            .fair(false)
            .into_future();
        // Polled until it has tried and waits for a pass or a release.
        assert!(
            timeout(Duration::from_millis(300), &mut waiter).await.is_err(),
            "the barging waiter got a held lock"
        );
        assert!(holder.release().await.unwrap(), "the holder's release answered not held");
        assert_eq!(counting.passes(), 1, "the release did not pass the lock to the waiter");
        // Cancelled with the passed lease unclaimed.
        drop(waiter);
        let free = grant_within_patience(&*s.backend, &key, LONG_TTL)
            .await
            .expect("the lease passed to a cancelled waiter was left held");
        assert!(s.backend.release(&free).await.unwrap());
    }
});
