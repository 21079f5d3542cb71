//! The release channels' subscriptions (DESIGN 5.2, "Waking waiters"): one task sends every
//! SUBSCRIBE and UNSUBSCRIBE of a backend, each carrying every channel that needs one, so
//! waiters arriving on many keys at once cost a few round trips, not one each in turn; and a
//! channel whose waiters leave and come back is never left unsubscribed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock_core::{LockGuard, Locker};
use fencelock_redis::servers::RedisServer;
use fencelock_redis::{RedisConfig, RedisLockBackend};

mod stats;
use stats::{admin, calls};
use tokio::time::{Instant, sleep};

const TTL: Duration = Duration::from_secs(30);
const PATIENCE: Duration = Duration::from_secs(20);
const KEYS: usize = 32;

async fn connect(server: &RedisServer) -> RedisLockBackend {
    RedisConfig::new(server.url())
        .prefix("subs")
        .connect()
        .await
        .expect("connect")
}

/// The channels of this test's prefix that some connection is subscribed to.
async fn subscribed(admin: &mut redis::aio::MultiplexedConnection) -> usize {
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("subs:*")
        .query_async(admin)
        .await
        .unwrap();
    channels.len()
}

/// Waits until `subscribed` is `want`, at most [`PATIENCE`].
async fn until_subscribed(admin: &mut redis::aio::MultiplexedConnection, want: usize) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = subscribed(admin).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{now} release channels subscribed, waited for {want}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// 32 waiters of one backend, each on its own held key, arriving at once: their channels are
/// subscribed in a few commands (one per round trip in which new waiters arrived), where one
/// SUBSCRIBE per channel, each waiting for the one before, took 32. Every waiter is still
/// granted when its key is released, and the channels are given up once nobody waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_many_keys_share_subscribe_round_trips() {
    let server = RedisServer::spawn();
    let holder = Locker::new(connect(&server).await);
    let waiting = Locker::new(connect(&server).await);
    let mut admin = admin(&server).await;
    let names: Vec<String> = (0..KEYS).map(|i| format!("hot-{i}")).collect();
    let mut held = Vec::new();
    for name in &names {
        held.push(holder.lock(name).ttl(TTL).watchdog(false).await.unwrap());
    }
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await
        .unwrap();

    let waiters: Vec<_> = names
        .iter()
        .map(|name| {
            tokio::spawn(
                waiting
                    .lock(name)
                    .ttl(TTL)
                    .watchdog(false)
                    .wait(PATIENCE * 2)
                    .into_future(),
            )
        })
        .collect();
    until_subscribed(&mut admin, KEYS).await;
    let subscribes = calls(&mut admin, &["subscribe"]).await;
    assert!(
        subscribes <= (KEYS / 2) as u64,
        "{subscribes} SUBSCRIBE commands for {KEYS} channels whose waiters came at once"
    );

    futures_util::future::join_all(held.into_iter().map(LockGuard::release)).await;
    for waiter in waiters {
        let guard = waiter.await.unwrap().expect("a waiter was not granted");
        assert!(guard.release().await.unwrap());
    }
    until_subscribed(&mut admin, 0).await;
}

/// A key's waiters leave (their wait runs out) and new ones come back, over and over, so that
/// the UNSUBSCRIBE of the idle channel and the SUBSCRIBE of the next waiter are in flight
/// together: whatever the order they were asked in, the server ends with the channel
/// subscribed while a waiter waits, and unsubscribed once it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_whose_waiters_come_back_stays_subscribed() {
    let server = RedisServer::spawn();
    let holder = Locker::new(connect(&server).await);
    let waiting = Locker::new(connect(&server).await);
    let mut admin = admin(&server).await;
    let held = holder.lock("churn").ttl(TTL).watchdog(false).await.unwrap();
    for round in 0..40u64 {
        let patience = Duration::from_millis(10 + round % 7 * 5);
        let refused = waiting
            .lock("churn")
            .ttl(TTL)
            .watchdog(false)
            .wait(patience)
            .await;
        assert!(refused.is_err(), "round {round}: a held key was granted");
    }
    let last = tokio::spawn(
        waiting
            .lock("churn")
            .ttl(TTL)
            .watchdog(false)
            .wait(PATIENCE * 2)
            .into_future(),
    );
    until_subscribed(&mut admin, 1).await;
    // Any UNSUBSCRIBE still on its way would land within this.
    sleep(Duration::from_secs(1)).await;
    assert_eq!(
        subscribed(&mut admin).await,
        1,
        "a waiter waits on a channel the server no longer has"
    );
    assert!(held.release().await.unwrap());
    let guard = last
        .await
        .unwrap()
        .expect("the last waiter was not granted");
    assert!(guard.release().await.unwrap());
    until_subscribed(&mut admin, 0).await;
}
