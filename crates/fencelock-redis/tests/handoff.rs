//! The server's hand-off on one node (DESIGN 4.0.1, 5.2): a release grants the lock to the
//! first live queued waiter itself, for a short hand-off ttl until the waiter renews it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock_core::{LockBackend, LockKey, Locker, OwnerId, QueueRole};
use fencelock_redis::servers::RedisServer;
use fencelock_redis::{RedisConfig, RedisLockBackend};
use tokio::time::{Instant, sleep, timeout};

const TTL: Duration = Duration::from_secs(30);
/// The hand-off ttl of the backend (`HANDOFF_TTL`): how long a handed grant lives untaken.
const HANDOFF: Duration = Duration::from_secs(2);
const PATIENCE: Duration = Duration::from_secs(10);

async fn connect(server: &RedisServer) -> RedisLockBackend {
    RedisConfig::new(server.url())
        .prefix("handoff")
        .connect()
        .await
        .expect("connect")
}

/// Queues `waiter` behind the holder with one refused try, and lets a millisecond pass: the
/// queue orders arrivals by the server's clock in ms (a tie goes by waiter id).
async fn queue(backend: &RedisLockBackend, key: &LockKey, waiter: OwnerId) {
    let granted = backend.try_acquire_queued(key, TTL, waiter).await.unwrap();
    assert!(granted.is_none(), "the key was free: nothing to queue for");
    sleep(Duration::from_millis(20)).await;
}

/// A release grants the lock to the first queued waiter at once, in the release's own step,
/// with the next token and the hand-off ttl, not the waiter's whole ttl; a waiter that
/// vanished without taking it up holds it no longer than that, and the waiter behind it is
/// granted soon after, long before a ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_waiter_holds_a_handed_lock_only_for_the_handoff_ttl() {
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    let key = LockKey::new("vanished").unwrap();
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let vanished = OwnerId::random();
    queue(&backend, &key, vanished).await;
    let locker = Locker::new(backend.clone());
    let next = tokio::spawn(
        locker
            .lock(key.as_str())
            .ttl(TTL)
            .wait(PATIENCE * 3)
            .into_future(),
    );
    // Time for the next waiter to queue behind the vanished one.
    sleep(Duration::from_millis(500)).await;
    assert!(backend.release(&held).await.unwrap());
    let released = Instant::now();
    let info = backend.inspect(&key).await.unwrap();
    let holder = info
        .holder
        .expect("the release left the lock free: nothing was handed");
    assert_eq!(
        holder.owner, vanished,
        "the lock went to someone other than the queue's head"
    );
    assert_eq!(holder.token.get(), held.token.get() + 1);
    let remaining = info.remaining.unwrap();
    assert!(
        remaining <= HANDOFF,
        "a handed grant lives {remaining:?}, more than the hand-off ttl {HANDOFF:?}"
    );
    let guard = timeout(PATIENCE, next)
        .await
        .expect("the waiter behind a vanished one was not granted within 10 s")
        .unwrap()
        .expect("the waiter behind a vanished one failed");
    let waited = released.elapsed();
    assert!(
        waited < HANDOFF * 2,
        "the waiter behind a vanished one waited {waited:?} after the release"
    );
    assert_eq!(guard.token().get(), held.token.get() + 2);
    assert_eq!(
        backend.inspect(&key).await.unwrap().holder,
        Some(guard.fence())
    );
    assert!(guard.release().await.unwrap());
}

/// A waiter that never heard the hand-off's publish (here: it never subscribed) finds the
/// grant with its next try as its own, renewed for the whole ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_publish_is_recovered_by_the_next_try() {
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    let key = LockKey::new("lost-publish").unwrap();
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let waiter = OwnerId::random();
    queue(&backend, &key, waiter).await;
    assert!(backend.release(&held).await.unwrap());
    let sent = Instant::now();
    let lease = backend
        .try_acquire_queued(&key, TTL, waiter)
        .await
        .unwrap()
        .expect("the next try did not find the grant handed to its waiter");
    assert_eq!(lease.owner, waiter);
    assert_eq!(lease.token.get(), held.token.get() + 1);
    assert!(lease.valid_until <= sent + TTL);
    assert!(lease.remaining() > TTL - Duration::from_secs(5));
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(info.holder, Some(lease.fence()));
    assert!(
        info.remaining.unwrap() > HANDOFF * 2,
        "the grant taken up was not renewed for the whole ttl: {:?} left",
        info.remaining
    );
    assert!(backend.release(&lease).await.unwrap());
}

/// A waiter that gives up its place after the lock was handed to it (its request timed out
/// or was cancelled) releases the grant at once, and the lock goes to the next waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_that_was_handed_the_lock_gives_it_up_at_once() {
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    let key = LockKey::new("cancelled-handed").unwrap();
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let cancelled = OwnerId::random();
    queue(&backend, &key, cancelled).await;
    let locker = Locker::new(backend.clone());
    let next = tokio::spawn(
        locker
            .lock(key.as_str())
            .ttl(TTL)
            .wait(PATIENCE * 3)
            .into_future(),
    );
    sleep(Duration::from_millis(500)).await;
    assert!(backend.release(&held).await.unwrap());
    let handed = backend.inspect(&key).await.unwrap().holder.unwrap();
    assert_eq!(handed.owner, cancelled);
    let left = Instant::now();
    backend.leave_queue(&key, cancelled).await.unwrap();
    let after = backend.inspect(&key).await.unwrap().holder;
    assert!(
        after.is_none_or(|holder| holder.owner != cancelled),
        "the waiter that left still holds the lock handed to it"
    );
    let guard = timeout(PATIENCE, next)
        .await
        .expect("the next waiter was not granted within 10 s of the leave")
        .unwrap()
        .unwrap();
    let waited = left.elapsed();
    assert!(
        waited < HANDOFF,
        "the next waiter waited {waited:?}: the lock was left to the hand-off ttl"
    );
    assert_eq!(guard.token().get(), held.token.get() + 2);
    assert!(guard.release().await.unwrap());
}

/// A `Locker` waiter takes up a handed lock for its whole ttl: with the watchdog, whose
/// renewals keep it past the hand-off ttl; without, renewed before the guard is returned.
/// The guard's deadline is never after the server's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_lock_is_held_for_the_waiters_ttl() {
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    for watchdog in [true, false] {
        let key = LockKey::new(format!("taken-up/{watchdog}")).unwrap();
        let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
        let locker = Locker::new(backend.clone());
        let waiter = tokio::spawn(
            locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(PATIENCE * 3)
                .watchdog(watchdog)
                .into_future(),
        );
        // Time to queue and subscribe, but not for the waiter's periodic try (every 500 ms),
        // which would find the grant itself: the publish hands it over.
        sleep(Duration::from_millis(300)).await;
        assert!(backend.release(&held).await.unwrap());
        let guard = timeout(PATIENCE, waiter).await.unwrap().unwrap().unwrap();
        assert_eq!(guard.token().get(), held.token.get() + 1);
        let lease = guard.lease();
        let info = backend.inspect(&key).await.unwrap();
        let after = Instant::now();
        assert_eq!(info.holder, Some(guard.fence()));
        let server_left = info.remaining.unwrap() + Duration::from_millis(1);
        assert!(
            lease.valid_until <= after + server_left,
            "the guard counts on the lock {:?} longer than the server keeps it",
            lease.valid_until - (after + server_left)
        );
        if !watchdog {
            assert!(
                lease.remaining() > HANDOFF * 2,
                "{:?} left",
                lease.remaining()
            );
        }
        sleep(HANDOFF + Duration::from_secs(1)).await;
        assert!(
            guard.is_held(),
            "watchdog {watchdog}: the guard lost the lock"
        );
        assert_eq!(
            backend.inspect(&key).await.unwrap().holder,
            Some(guard.fence())
        );
        assert!(guard.release().await.unwrap());
    }
}

/// `inspect_queue` lists what the scripts keep: the holder with its token and time left, then
/// the live waiters by arrival (no token yet: it is drawn at the grant), without the ones that
/// left; after a hand-off the first waiter is the holder; a read phase lists its readers with
/// the phase's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_queue_lists_the_holder_then_the_waiters_by_arrival() {
    use fencelock_core::QueueRole::{Holder, Reader, Waiting};
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    let key = LockKey::new("listed").unwrap();
    assert_eq!(backend.inspect_queue(&key).await.unwrap(), Some(Vec::new()));

    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let (first, second, third) = (OwnerId::random(), OwnerId::random(), OwnerId::random());
    for waiter in [first, second, third] {
        queue(&backend, &key, waiter).await;
    }
    backend.leave_queue(&key, second).await.unwrap();
    let listed = backend.inspect_queue(&key).await.unwrap().unwrap();
    let shown: Vec<_> = listed.iter().map(|e| (e.role, e.owner, e.token)).collect();
    assert_eq!(
        shown,
        vec![
            (Holder, held.owner, Some(held.token)),
            (Waiting, first, None),
            (Waiting, third, None)
        ]
    );
    assert!(listed[0].remaining > Duration::from_secs(20) && listed[0].remaining <= TTL);
    assert!(listed[1].remaining > Duration::ZERO && listed[1].remaining <= HANDOFF);

    // The release hands the lock to the first waiter: it heads the list as the holder.
    assert!(backend.release(&held).await.unwrap());
    let listed = backend.inspect_queue(&key).await.unwrap().unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!((listed[0].role, listed[0].owner), (Holder, first));
    assert!(listed[0].token > Some(held.token));
    assert_eq!((listed[1].role, listed[1].owner), (Waiting, third));
    backend.leave_queue(&key, third).await.unwrap();
    backend.leave_queue(&key, first).await.unwrap();

    // A read phase: its live readers, each with the phase's token.
    let (r1, r2) = (OwnerId::random(), OwnerId::random());
    let phase = backend
        .try_acquire_shared(&key, r1, TTL)
        .await
        .unwrap()
        .unwrap();
    backend
        .try_acquire_shared(&key, r2, TTL)
        .await
        .unwrap()
        .unwrap();
    let mut listed = backend.inspect_queue(&key).await.unwrap().unwrap();
    listed.sort_by_key(|e| e.owner.to_string());
    let mut expected = vec![r1, r2];
    expected.sort_by_key(|o| o.to_string());
    let shown: Vec<_> = listed.iter().map(|e| (e.role, e.owner, e.token)).collect();
    assert_eq!(
        shown,
        expected
            .into_iter()
            .map(|owner| (Reader, owner, Some(phase.token)))
            .collect::<Vec<_>>()
    );
    assert!(backend.release_shared(&phase, r1).await.unwrap());
    assert!(backend.release_shared(&phase, r2).await.unwrap());
    assert_eq!(backend.inspect_queue(&key).await.unwrap(), Some(Vec::new()));
}

/// A hand-off is announced by a publish, which any client with the publish right can send:
/// a forged one, from an ACL user that may only read and publish, naming a queued waiter and
/// telling it a grant (token 777777, 60 s) while another client holds the lock, wakes the
/// waiter at most. It is not granted, the key's counter does not move, and when the holder
/// releases, the waiter gets the next real token (DESIGN 4.0.1: a grant comes only from a
/// try's answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_hand_off_publish_grants_nothing() {
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    let key = LockKey::new("forged").unwrap();
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let waiting = tokio::spawn(
        Locker::new(backend.clone())
            .lock(key.as_str())
            .ttl(TTL)
            .wait(PATIENCE * 3)
            .into_future(),
    );
    let deadline = Instant::now() + PATIENCE;
    let waiter = loop {
        let queue = backend
            .inspect_queue(&key)
            .await
            .unwrap()
            .unwrap_or_default();
        if let Some(entry) = queue.iter().find(|e| e.role == QueueRole::Waiting) {
            break entry.owner;
        }
        assert!(Instant::now() < deadline, "the waiter never queued");
        sleep(Duration::from_millis(20)).await;
    };
    // Time for the waiter to subscribe to the key's channel.
    sleep(Duration::from_millis(500)).await;

    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                "forger",
                "on",
                ">forger-pass",
                "~*",
                "&*",
                "-@all",
                "+@read",
                "+publish",
            ][..],
        )
        .query_async(&mut admin)
        .await
        .unwrap();
    let forger = redis::Client::open(format!(
        "redis://forger:forger-pass@127.0.0.1:{}",
        server.port()
    ))
    .unwrap();
    let mut forger = forger.get_multiplexed_async_connection().await.unwrap();
    let time: Vec<String> = redis::cmd("TIME").query_async(&mut admin).await.unwrap();
    let now_us = time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap();
    let channel = format!("handoff:{{{}}}:released", key.as_str());
    let heard: i64 = redis::cmd("PUBLISH")
        .arg(&channel)
        .arg(format!(">{waiter} 777777 {now_us} 60000"))
        .query_async(&mut forger)
        .await
        .unwrap();
    assert_eq!(
        heard, 1,
        "nobody listens on {channel}: the forgery tests nothing"
    );
    sleep(Duration::from_secs(1)).await;
    assert!(
        !waiting.is_finished(),
        "the forged publish granted the waiter the lock"
    );
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder.map(|h| h.token),
        Some(held.token),
        "the holder changed"
    );
    assert_eq!(info.last_token, Some(held.token), "the counter moved");

    assert!(backend.release(&held).await.unwrap());
    let guard = timeout(PATIENCE, waiting)
        .await
        .expect("the waiter was not granted after the release")
        .unwrap()
        .unwrap();
    assert_eq!(guard.fence().token.get(), held.token.get() + 1);
    assert!(guard.release().await.unwrap());
}

/// Waits until a client of `server` is blocked in a grant box's pop.
async fn pop_blocked(admin: &mut redis::aio::MultiplexedConnection) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(admin)
            .await
            .unwrap();
        if clients.contains("cmd=blmpop") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no waiter blocked in BLMPOP: {clients}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// The grant a release hands over arrives in the reply of the pop the waiter's process has
/// blocked in the server: the guard comes with the hand-off ttl the release script set, not
/// the whole ttl a take-up try would renew it to. (A periodic try of the waiter may find the
/// grant first if it lands in the moment between the release and the pop's reply, so up to
/// three hand-offs are made; before the grant box, every one was taken up by a try.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_grant_arrives_in_the_reply_of_the_blocked_pop() {
    let server = RedisServer::spawn();
    let holder = connect(&server).await;
    // The waiter's process: a backend of its own, with its own grant box.
    let waiting = connect(&server).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let mut boxed = 0;
    for round in 0..3 {
        let key = LockKey::new(format!("boxed/{round}")).unwrap();
        let held = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
        let waiter = tokio::spawn(
            Locker::new(waiting.clone())
                .lock(key.as_str())
                .ttl(TTL)
                .wait(PATIENCE * 3)
                .into_future(),
        );
        pop_blocked(&mut admin).await;
        sleep(Duration::from_millis(100)).await;
        let released = Instant::now();
        assert!(holder.release(&held).await.unwrap());
        let guard = timeout(PATIENCE, waiter).await.unwrap().unwrap().unwrap();
        let lease = guard.lease();
        assert_eq!(lease.token.get(), held.token.get() + 1);
        let info = holder.inspect(&key).await.unwrap();
        assert_eq!(info.holder, Some(guard.fence()));
        if lease.valid_until <= released + HANDOFF {
            boxed += 1;
            // Under the watchdog the short grant becomes the waiter's whole ttl.
            sleep(HANDOFF + Duration::from_secs(1)).await;
            assert!(guard.is_held(), "the boxed grant was not renewed");
            assert!(holder.inspect(&key).await.unwrap().remaining.unwrap() > HANDOFF * 2);
            assert!(guard.release().await.unwrap());
            break;
        }
        assert!(guard.release().await.unwrap());
    }
    assert_eq!(
        boxed, 1,
        "in three hand-offs, every grant was taken up by a try: none came from the pop"
    );
}

/// A server that refuses `BLMPOP` (an ACL without it here; a server before 7.0 alike) turns
/// the grant box off: waiters are granted as before, woken by the publish, and the asks
/// their tries leave stop naming a box.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_the_pop_still_hands_off_by_publish() {
    let server = RedisServer::spawn();
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                "nopop",
                "on",
                ">nopop-pass",
                "~*",
                "&*",
                "+@all",
                "-blmpop",
            ][..],
        )
        .query_async(&mut admin)
        .await
        .unwrap();
    let holder = connect(&server).await;
    let waiting = RedisConfig::new(format!(
        "redis://nopop:nopop-pass@127.0.0.1:{}",
        server.port()
    ))
    .prefix("handoff")
    .connect()
    .await
    .unwrap();
    for round in 0..2 {
        let key = LockKey::new(format!("nopop/{round}")).unwrap();
        let held = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
        let waiter = tokio::spawn(
            Locker::new(waiting.clone())
                .lock(key.as_str())
                .ttl(TTL)
                .wait(PATIENCE * 3)
                .into_future(),
        );
        sleep(Duration::from_millis(300)).await;
        let asks: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(format!("handoff:{{{}}}:asks", key.as_str()))
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(asks.len(), 1, "the waiter left no ask: {asks:?}");
        if round == 1 {
            assert!(
                asks.values().all(|ask| !ask.contains(' ')),
                "after the server refused the pop, a try still names the box: {asks:?}"
            );
        }
        assert!(holder.release(&held).await.unwrap());
        let guard = timeout(PATIENCE, waiter).await.unwrap().unwrap().unwrap();
        assert_eq!(guard.token().get(), held.token.get() + 1);
        assert!(guard.release().await.unwrap());
    }
}

/// The requests clients sent the server, as `MONITOR` shows them, collected from now on: the
/// commands a script ran (`[0 lua]`) are left out, so a script is one request.
struct Requests {
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Requests {
    async fn watch(server: &RedisServer) -> Requests {
        use futures_util::StreamExt;
        let client = redis::Client::open(server.url()).unwrap();
        let monitor = client.get_async_monitor().await.unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                let mut lines = monitor.into_on_message::<String>();
                while let Some(line) = lines.next().await {
                    if !line.contains(" lua]") {
                        seen.lock().unwrap().push(line);
                    }
                }
            }
        });
        Requests { seen, task }
    }

    /// The requests seen since the last call, once the monitor caught up.
    async fn since_last(&self) -> Vec<String> {
        sleep(Duration::from_millis(200)).await;
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An uncontended grant and its release are one request each (one script, its SHA cached),
/// as `MONITOR` sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_grant_and_its_release_are_one_request_each() {
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    let key = LockKey::new("one-trip").unwrap();
    // The scripts are loaded by the first use of each.
    let warm = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(backend.release(&warm).await.unwrap());
    let requests = Requests::watch(&server).await;
    let _ = requests.since_last().await;
    for round in 0..3 {
        let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
        let granted = requests.since_last().await;
        assert_eq!(
            granted.len(),
            1,
            "round {round}: a free grant sent {granted:?}"
        );
        assert!(backend.release(&lease).await.unwrap());
        let released = requests.since_last().await;
        assert_eq!(
            released.len(),
            1,
            "round {round}: a release sent {released:?}"
        );
    }
}

/// A pass whose answer is no higher token than the holder's (here the key's counter was set
/// back from outside while the lock was held) is an error naming both tokens, and the token
/// is never handed to the waiting request (DESIGN 4.0.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_that_answers_a_lower_token_is_an_error_and_hands_nothing() {
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    let key = LockKey::new("pass-back").unwrap();
    let locker = Locker::new(backend.clone());
    let holder = locker.clone().lock(key.as_str()).ttl(TTL).await.unwrap();
    let held = holder.lease();
    let waiter = tokio::spawn(
        locker
            .lock(key.as_str())
            .ttl(TTL)
            .wait(Duration::from_secs(3))
            .fair(false)
            .into_future(),
    );
    sleep(Duration::from_millis(300)).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let counters: Vec<String> = redis::cmd("KEYS")
        .arg("handoff:*:token")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(counters.len(), 1, "one token counter: {counters:?}");
    let _: () = redis::cmd("SET")
        .arg(&counters[0])
        .arg(0)
        .query_async(&mut admin)
        .await
        .unwrap();
    let error = holder
        .release()
        .await
        .expect_err("a pass that answered token 1 was taken");
    let message = error.to_string();
    assert!(
        message.contains("answered token 1") && message.contains(&held.token.to_string()),
        "the error does not name both tokens: {message}"
    );
    match waiter.await.unwrap() {
        Ok(guard) => panic!("the waiter was handed token {}", guard.token()),
        Err(e) => assert!(
            matches!(e, fencelock_core::Error::Timeout { .. }),
            "the waiter failed otherwise: {e}"
        ),
    }
}
