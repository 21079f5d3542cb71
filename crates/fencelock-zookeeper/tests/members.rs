//! Members of a three-server ensemble failing under the ZooKeeper backend: a follower killed,
//! the leader killed while several clients acquire one key, the whole ensemble restarted.
//!
//! Timeouts are generous: the test machine runs at a load of 8 to 10.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::ZkServer;
use fencelock_core::{
    Error, FencedStorage, FencingToken, LockBackend, LockKey, LockOptions, Locker, OwnerId,
};
use fencelock_servers::proxy::FaultProxy;
use fencelock_zookeeper::{ZkConfig, ZkLockBackend, ZkStorage};
use tokio::time::{Instant, sleep, timeout};

/// How long one operation may keep failing (retryably) while the ensemble fails over.
const FAILOVER: Duration = Duration::from_secs(60);

fn key(name: &str) -> LockKey {
    LockKey::new(format!("members/{name}/{}", OwnerId::random())).unwrap()
}

/// Runs `op` until it succeeds, retrying retryable errors for up to [`FAILOVER`].
async fn retry<T, Fut>(what: &str, mut op: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = fencelock_core::Result<T>>,
{
    let deadline = Instant::now() + FAILOVER;
    loop {
        match op().await {
            Ok(value) => return value,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// Runs `f` on the ensemble off the async threads (the spawner blocks while it waits).
async fn on_ensemble<T: Send + 'static>(
    server: &Arc<ZkServer>,
    f: impl FnOnce(&ZkServer) -> T + Send + 'static,
) -> T {
    let server = server.clone();
    tokio::task::spawn_blocking(move || f(&server))
        .await
        .expect("the ensemble call panicked")
}

/// The member that leads now, waiting up to a minute for an election to settle.
async fn leader(server: &Arc<ZkServer>) -> usize {
    let deadline = Instant::now() + FAILOVER;
    loop {
        if let Some(leader) = on_ensemble(server, |s| s.leader()).await {
            return leader;
        }
        assert!(Instant::now() < deadline, "no leader within {FAILOVER:?}");
        sleep(Duration::from_millis(200)).await;
    }
}

/// Connects, retrying while the ensemble fails over.
async fn connect(config: &ZkConfig) -> ZkLockBackend {
    retry("connect", || config.connect()).await
}

/// One grant of `key` (retrying while it is held or the ensemble fails over), a fenced write
/// of the token to `key` in `storage`, a check that it landed, and a release: the token.
async fn cycle(backend: &ZkLockBackend, storage: &ZkStorage, key: &LockKey) -> FencingToken {
    let deadline = Instant::now() + FAILOVER;
    let lease = loop {
        match backend.try_acquire(key, Duration::from_secs(10)).await {
            Ok(Some(lease)) => break lease,
            Ok(None) => {}
            Err(e) if e.is_retryable() => {}
            Err(e) => panic!("acquire: {e}"),
        }
        assert!(Instant::now() < deadline, "no grant within {FAILOVER:?}");
        sleep(Duration::from_millis(200)).await;
    };
    let value = lease.token.get().to_string();
    // A repeated write with the same fence is admitted again: retrying is safe.
    retry("fenced write", || {
        storage.write(key, lease.fence(), value.as_bytes())
    })
    .await;
    let seen = retry("peek", || storage.peek(key)).await.expect("written");
    assert_eq!(seen.value.as_deref(), Some(value.as_bytes()));
    assert_eq!(seen.fence, lease.fence());
    retry("release", || backend.release(&lease)).await;
    lease.token
}

/// `config` (same prefix and session timeout) on other hosts, however many.
fn on_hosts(config: &ZkConfig, hosts: &[String]) -> ZkConfig {
    ZkConfig::from_url(&format!("zookeeper://{}", hosts.join(",")))
        .unwrap()
        .prefix(config.prefix_name())
        .session_timeout(config.session_timeout_value())
}

/// A proxy in front of member `index`.
async fn proxy_to(server: &ZkServer, index: usize) -> FaultProxy {
    let target: SocketAddr = format!("127.0.0.1:{}", server.client_port(index))
        .parse()
        .unwrap();
    FaultProxy::start(target).await.unwrap()
}

// Catches: a client whose member dies and that cannot move to the members left (locks stop
// working), or tokens that do not keep increasing across the member's death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_killed_leaves_locks_working_and_tokens_increasing() {
    let server = common::spawn(3).await;
    let config = common::config(&server);
    let lead = leader(&server).await;
    let follower = (0..3).find(|&i| i != lead).unwrap();
    // A client that is surely connected to the follower: its only other host refuses every
    // connection until the follower is up and serving this client.
    let detour = proxy_to(&server, lead).await;
    detour.set_reset(true);
    let pinned = on_hosts(
        &config,
        &[
            format!("127.0.0.1:{}", server.client_port(follower)),
            detour.addr().to_string(),
        ],
    )
    .connect()
    .await
    .expect("connect through the follower");
    detour.heal();
    let anywhere = config.connect().await.unwrap();
    let key = key("follower");
    let mut last = cycle(&pinned, &pinned.storage(), &key).await;
    let token = cycle(&anywhere, &anywhere.storage(), &key).await;
    assert!(token > last, "{token:?} after {last:?}");
    last = token;

    on_ensemble(&server, move |s| s.kill(follower)).await;

    for round in 0..5 {
        for backend in [&pinned, &anywhere] {
            let token = cycle(backend, &backend.storage(), &key).await;
            assert!(token > last, "round {round}: {token:?} after {last:?}");
            last = token;
        }
    }
    // A new session, given every member (the dead one too), works as well.
    let fresh = connect(&config).await;
    let token = cycle(&fresh, &fresh.storage(), &key).await;
    assert!(token > last, "{token:?} after {last:?}");
}

/// One worker's grant: its token, when this process had it, and whether the lease was still
/// held when the work was done.
#[derive(Debug)]
struct Hold {
    token: FencingToken,
    start: Instant,
    end: Instant,
    held_throughout: bool,
    /// Whether the storage refused its fence.
    refused: bool,
}

#[derive(Debug, Default)]
struct Tally {
    holds: Vec<Hold>,
    /// Increments the storage admitted (an unknown outcome resolved by reading it back).
    admitted: u64,
    /// Operations the storage refused as stale.
    refused: u64,
    /// Holds whose read or write failed (retryable) and that then wrote nothing.
    gave_up: u64,
}

/// Takes `key` through a `Locker` until `stop`, each time incrementing the counter in
/// `resource` by a fenced read and a fenced write of `<count>:<token>`.
async fn worker(
    config: ZkConfig,
    key: LockKey,
    resource: LockKey,
    stop: Arc<AtomicBool>,
    grants: Arc<AtomicU64>,
) -> Tally {
    let backend = connect(&config).await;
    let storage = backend.storage();
    // The watchdog renews the 15 s ttl, so a holder slowed down by an election keeps its lease.
    let locker = Locker::new(Arc::new(backend)).with_options(LockOptions {
        ttl: Duration::from_secs(15),
        wait: Duration::from_secs(90),
        watchdog: true,
        ..LockOptions::default()
    });
    let mut tally = Tally::default();
    while !stop.load(Ordering::SeqCst) {
        let guard = match locker.lock(key.as_str()).await {
            Ok(guard) => guard,
            Err(e) if e.is_retryable() => continue,
            Err(e) => panic!("lock: {e:?}"),
        };
        let start = Instant::now();
        grants.fetch_add(1, Ordering::SeqCst);
        let fence = guard.fence();
        let refused_before = tally.refused;
        match storage.read(&resource, fence).await {
            Ok(value) => {
                let count = count_of(value.as_deref());
                let next = format!("{}:{}", count + 1, fence.token.get());
                match storage.write(&resource, fence, next.as_bytes()).await {
                    Ok(()) => tally.admitted += 1,
                    Err(Error::Stale { .. }) => tally.refused += 1,
                    Err(e) if e.is_retryable() => {
                        // Unknown outcome: the value names its writer's token, and requests of
                        // one session are applied in order, so reading it back tells.
                        let seen = retry("peek", || storage.peek(&resource)).await;
                        let landed = seen.and_then(|s| s.value).as_deref() == Some(next.as_bytes());
                        if landed {
                            tally.admitted += 1;
                        } else {
                            tally.gave_up += 1;
                        }
                    }
                    Err(e) => panic!("fenced write: {e:?}"),
                }
            }
            Err(Error::Stale { .. }) => tally.refused += 1,
            Err(e) if e.is_retryable() => tally.gave_up += 1,
            Err(e) => panic!("fenced read: {e:?}"),
        }
        let end = Instant::now();
        let held_throughout = guard.is_held();
        // A release lost in the failover leaves the node to its ttl: the others wait it out.
        let _ = guard.release().await;
        tally.holds.push(Hold {
            token: fence.token,
            start,
            end,
            held_throughout,
            refused: tally.refused > refused_before,
        });
    }
    tally
}

/// The count in a counter value `<count>:<token>`; zero for none.
fn count_of(value: Option<&[u8]>) -> u64 {
    let Some(value) = value else { return 0 };
    let text = std::str::from_utf8(value).unwrap();
    text.split(':').next().unwrap().parse().unwrap()
}

/// Waits until `grants` reaches `at_least`.
async fn await_grants(grants: &AtomicU64, at_least: u64, within: Duration) {
    let deadline = Instant::now() + within;
    while grants.load(Ordering::SeqCst) < at_least {
        assert!(
            Instant::now() < deadline,
            "only {} of {at_least} grants within {within:?}",
            grants.load(Ordering::SeqCst)
        );
        sleep(Duration::from_millis(50)).await;
    }
}

// Catches: a token granted twice across the leader change (a counter write that was not a
// quorum-committed compare-and-set), two holders at once (a grant while another lease is held:
// found by the overlapping holds, or by a lost increment, where the final counter falls short
// of the admitted increments), a holder refused by the storage while it still held the lease,
// and a killed leader that does not rejoin with the data on restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_during_acquires_repeats_no_token_and_admits_no_second_holder() {
    let server = common::spawn(3).await;
    let config = common::config(&server);
    let key = key("leader");
    let resource = key.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(worker(
                config.clone(),
                key.clone(),
                resource.clone(),
                stop.clone(),
                grants.clone(),
            ))
        })
        .collect();
    await_grants(&grants, 20, Duration::from_secs(120)).await;
    let lead = leader(&server).await;
    on_ensemble(&server, move |s| s.kill(lead)).await;
    let at_kill = grants.load(Ordering::SeqCst);
    // Grants after the kill: the two members left elect a leader and locks work on.
    await_grants(&grants, at_kill + 40, Duration::from_secs(180)).await;
    stop.store(true, Ordering::SeqCst);
    let mut tallies = Vec::new();
    for worker in workers {
        let tally = timeout(Duration::from_secs(180), worker)
            .await
            .expect("a worker did not stop within 180 s")
            .expect("a worker panicked");
        tallies.push(tally);
    }
    let holds: Vec<&Hold> = tallies.iter().flat_map(|t| &t.holds).collect();
    let admitted: u64 = tallies.iter().map(|t| t.admitted).sum();
    let refused: u64 = tallies.iter().map(|t| t.refused).sum();
    let gave_up: u64 = tallies.iter().map(|t| t.gave_up).sum();
    let summary = format!(
        "{} holds, {admitted} admitted, {refused} refused, {gave_up} gave up",
        holds.len()
    );

    let mut tokens = HashSet::new();
    for hold in &holds {
        assert!(
            tokens.insert(hold.token),
            "token {:?} granted twice ({summary})",
            hold.token
        );
    }
    for held in holds.iter().filter(|h| h.held_throughout) {
        for other in &holds {
            let inside = other.start >= held.start && other.start <= held.end;
            assert!(
                std::ptr::eq(*held, *other) || !inside,
                "token {:?} was granted while {:?} was held ({summary})",
                other.token,
                held.token
            );
        }
    }
    // A refusal means a greater fence was admitted meanwhile: fine for a lease that lapsed,
    // a second holder for one that did not.
    let refused_while_held = holds
        .iter()
        .filter(|h| h.held_throughout && h.refused)
        .count();
    assert_eq!(refused_while_held, 0, "refused while held ({summary})");
    assert!(admitted > 0, "{summary}");

    on_ensemble(&server, move |s| s.restart(lead)).await;
    // The restarted member alone: it caught up with the counter and the data.
    let via_restarted = connect(&on_hosts(
        &config,
        &[format!("127.0.0.1:{}", server.client_port(lead))],
    ))
    .await;
    let storage = via_restarted.storage();
    let final_count = count_of(
        retry("peek", || storage.peek(&resource))
            .await
            .and_then(|s| s.value)
            .as_deref(),
    );
    assert_eq!(
        final_count, admitted,
        "lost or doubled increments ({summary})"
    );
    let max = tokens.iter().max().copied().unwrap();
    let lease = retry("acquire via the restarted member", || async {
        via_restarted
            .try_acquire(&key, Duration::from_secs(10))
            .await?
            .ok_or_else(|| Error::Unavailable {
                backend: "test",
                message: "still held".into(),
                source: None,
            })
    })
    .await;
    assert!(lease.token > max, "{:?} after {max:?}", lease.token);
    let value = retry("fenced read", || storage.read(&resource, lease.fence())).await;
    assert_eq!(count_of(value.as_deref()), admitted);
    let next = format!("{}:{}", admitted + 1, lease.token.get());
    retry("fenced write", || {
        storage.write(&resource, lease.fence(), next.as_bytes())
    })
    .await;
    assert!(retry("release", || via_restarted.release(&lease)).await);
}

// Catches: tokens that do not survive the ensemble's data, e.g. kept in memory, in a session,
// or derived from something that restarts (the next grant would repeat or go below an old
// token), and a storage that forgets its fence and value over a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ensemble_restart_keeps_tokens_increasing() {
    let server = common::spawn(3).await;
    let config = common::config(&server);
    let before = config.connect().await.unwrap();
    let key = key("restart");
    let mut max = FencingToken::MIN;
    for _ in 0..5 {
        max = max.max(cycle(&before, &before.storage(), &key).await);
    }
    let last_value = max.get().to_string();
    drop(before);

    on_ensemble(&server, |s| {
        for index in 0..s.len() {
            s.kill(index);
        }
    })
    .await;
    // Each member waits for a quorum before it serves, so they come back together.
    let restarts: Vec<_> = (0..server.len())
        .map(|index| {
            let server = server.clone();
            tokio::task::spawn_blocking(move || server.restart(index))
        })
        .collect();
    for restart in restarts {
        restart.await.expect("a member did not come back");
    }

    let after = connect(&config).await;
    let storage = after.storage();
    let seen = retry("peek", || storage.peek(&key))
        .await
        .expect("the value outlived the restart");
    assert_eq!(seen.value.as_deref(), Some(last_value.as_bytes()));
    let token = cycle(&after, &storage, &key).await;
    assert!(token > max, "{token:?} after the restart, {max:?} before");
}

// Catches: an operation in flight when its member dies failing with an error callers do not
// retry. Killing a member that has unread requests in its socket makes the kernel reset the
// connection (RST); the client fails the requests in flight with that I/O error
// (`zk::Error::Custom`), which the backend must map, like `ConnectionLoss`, to a retryable
// `Unavailable`. Pausing the member first makes sure the request sits unread when it dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_in_flight_when_its_member_dies_fails_retryably() {
    let server = common::spawn(3).await;
    let config = common::config(&server);
    let lead = leader(&server).await;
    let follower = (0..3).find(|&i| i != lead).unwrap();
    let detour = proxy_to(&server, lead).await;
    detour.set_reset(true);
    let pinned = on_hosts(
        &config,
        &[
            format!("127.0.0.1:{}", server.client_port(follower)),
            detour.addr().to_string(),
        ],
    )
    .connect()
    .await
    .expect("connect through the follower");
    detour.heal();
    let storage = pinned.storage();
    let key = key("in-flight");
    let lease = pinned
        .try_acquire(&key, Duration::from_secs(20))
        .await
        .unwrap()
        .expect("free key");
    on_ensemble(&server, move |s| s.pause(follower)).await;
    let fence = lease.fence();
    let write = tokio::spawn(async move { storage.write(&key, fence, b"in flight").await });
    sleep(Duration::from_millis(500)).await;
    on_ensemble(&server, move |s| s.kill(follower)).await;
    match timeout(Duration::from_secs(30), write).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => assert!(e.is_retryable(), "not retryable: {e:?}"),
        Ok(Err(e)) => panic!("the write panicked: {e}"),
        Err(_) => panic!("the write did not end within 30 s"),
    }
}
