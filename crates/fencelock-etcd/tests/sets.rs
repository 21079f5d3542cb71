//! A set of locks in one step on real etcd (DESIGN 4.2, 5.5): `Locker::lock_all` of free keys
//! is one transaction (one revision, one Raft proposal), every key or none, each with its own
//! counter's next token; a set never takes part of itself, never overtakes a held key, a
//! read phase or a queue, and its members are released and renewed one by one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::EtcdServer;
use etcd_client::GetOptions;
use fencelock_core::{Error, FencingToken, LockBackend, LockKey, Locker, OwnerId};
use fencelock_etcd::{EtcdCluster, MAX_SET_KEYS};
use tokio::time::{sleep, timeout};

const TTL: Duration = Duration::from_secs(30);
const PATIENCE: Duration = Duration::from_secs(60);

fn keys(names: &[&str]) -> Vec<LockKey> {
    let mut keys: Vec<LockKey> = names
        .iter()
        .map(|name| LockKey::new(format!("sets/{name}")).unwrap())
        .collect();
    keys.sort();
    keys
}

/// The store's revision now, from a linearizable Get's header: every write to the key-value
/// store (one transaction, however many keys it puts) moves it by one.
async fn revision(cluster: &EtcdCluster) -> i64 {
    cluster
        .client()
        .kv_client()
        .get("sets-revision-probe", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision()
}

/// The Raft proposals the member has seen committed, from etcd's `/metrics` (served on the
/// client port): lease grants and revocations count here, not in the revision.
async fn proposals_committed(server: &Arc<EtcdServer>) -> u64 {
    let port = server.client_port(0);
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut body = String::new();
        stream.read_to_string(&mut body).unwrap();
        let line = body
            .lines()
            .find_map(|line| line.strip_prefix("etcd_server_proposals_committed_total "))
            .unwrap_or_else(|| panic!("no etcd_server_proposals_committed_total in /metrics"));
        line.trim().parse::<f64>().unwrap() as u64
    })
    .await
    .unwrap()
}

/// How many places the key's queue holds, read under the cluster's prefix.
async fn places(cluster: &EtcdCluster, key: &LockKey) -> i64 {
    let prefix = format!(
        "{}/queue/{}:{key}/",
        cluster.config().prefix_name(),
        key.as_str().len()
    );
    cluster
        .client()
        .kv_client()
        .get(
            prefix,
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .unwrap()
        .count()
}

/// Every key of `set` free, and its counter where `last` says.
async fn assert_untouched(
    backend: &dyn LockBackend,
    set: &[LockKey],
    last: &[Option<FencingToken>],
) {
    for (key, last) in set.iter().zip(last) {
        let info = backend.inspect(key).await.unwrap();
        assert_eq!(info.holder, None, "a refused set left {key} held");
        assert_eq!(
            info.last_token, *last,
            "a refused set moved {key}'s counter"
        );
    }
}

async fn last_tokens(backend: &dyn LockBackend, set: &[LockKey]) -> Vec<Option<FencingToken>> {
    let mut last = Vec::new();
    for key in set {
        last.push(backend.inspect(key).await.unwrap().last_token);
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_of_three_free_keys_is_one_write() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend = cluster.lock_backend();
    assert!(backend.capabilities().atomic_sets);
    let locker = Locker::new(cluster.backend());
    // A set granted and released first leaves three spare leases of this ttl, so the set
    // measured below needs no lease grant: only its transaction.
    let warm = locker
        .lock_all(["sets/w-a", "sets/w-b", "sets/w-c"])
        .ttl(TTL)
        .watchdog(false)
        .await
        .unwrap();
    assert!(warm.release().await.unwrap());
    // Three releases, three revisions; nothing else writes on this private server.
    let (revision_before, proposals_before) =
        (revision(&cluster).await, proposals_committed(&server).await);
    let set = locker
        .lock_all(["sets/c", "sets/a", "sets/b"])
        .ttl(TTL)
        .watchdog(false)
        .await
        .unwrap();
    let (revision_after, proposals_after) =
        (revision(&cluster).await, proposals_committed(&server).await);
    assert_eq!(
        revision_after - revision_before,
        1,
        "three free keys taken key by key would be three transactions (three revisions)"
    );
    assert_eq!(
        proposals_after - proposals_before,
        1,
        "the set took more than one Raft proposal (lease grants included)"
    );
    let held: Vec<String> = set.keys().map(|key| key.to_string()).collect();
    assert_eq!(held, ["sets/a", "sets/b", "sets/c"]);
    for member in set.members() {
        let info = backend.inspect(&member.lease().key).await.unwrap();
        assert_eq!(
            info.holder,
            Some(member.lease().fence()),
            "{} does not carry its grant",
            member.lease().key
        );
    }
    assert!(set.is_held());
    assert!(set.release().await.unwrap());
    for key in keys(&["a", "b", "c"]) {
        assert_eq!(
            backend.inspect(&key).await.unwrap().holder,
            None,
            "{key} still held after the set's release"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_takes_its_own_counters_next_token() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend = cluster.lock_backend();
    let set = keys(&["x", "y"]);
    backend
        .advance_token(&set[0], FencingToken::new(100).unwrap())
        .await
        .unwrap();
    let first = backend
        .try_acquire_all(&set, TTL)
        .await
        .unwrap()
        .expect("both keys are free");
    assert_eq!(
        first.iter().map(|l| l.key.clone()).collect::<Vec<_>>(),
        set,
        "one lease per key, in order"
    );
    assert_eq!(first[0].token.get(), 101);
    assert_eq!(first[1].token.get(), 1);
    for lease in &first {
        assert!(backend.release(lease).await.unwrap());
    }
    // A single grant after the set continues each key's counter, and a set after it too.
    let single = backend.try_acquire(&set[1], TTL).await.unwrap().unwrap();
    assert_eq!(single.token.get(), 2);
    assert!(backend.release(&single).await.unwrap());
    let second = backend.try_acquire_all(&set, TTL).await.unwrap().unwrap();
    assert_eq!((second[0].token.get(), second[1].token.get()), (102, 3));
    for lease in &second {
        assert!(backend.release(lease).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_with_one_key_held_or_queued_for_or_read_writes_nothing() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend = cluster.lock_backend();
    let set = keys(&["p", "q", "r"]);
    // Earlier grants, so that the counters are not all at zero.
    for key in &set[..2] {
        let lease = backend.try_acquire(key, TTL).await.unwrap().unwrap();
        assert!(backend.release(&lease).await.unwrap());
    }

    // Held by another grant.
    let held = backend.try_acquire(&set[1], TTL).await.unwrap().unwrap();
    let last = last_tokens(&backend, &[set[0].clone(), set[2].clone()]).await;
    let before = revision(&cluster).await;
    assert!(
        backend.try_acquire_all(&set, TTL).await.unwrap().is_none(),
        "a set with a held key was granted"
    );
    assert_eq!(
        revision(&cluster).await,
        before,
        "a refused set wrote to the store"
    );
    assert_untouched(&backend, &[set[0].clone(), set[2].clone()], &last).await;
    assert_eq!(
        backend.inspect(&set[1]).await.unwrap().holder,
        Some(held.fence())
    );

    // Free again, but a waiter is queued for it: a set never overtakes a queue.
    let waiter = OwnerId::random();
    assert!(
        backend
            .try_acquire_queued(&set[1], TTL, waiter)
            .await
            .unwrap()
            .is_none()
    );
    assert!(backend.release(&held).await.unwrap());
    assert_eq!(
        places(&cluster, &set[1]).await,
        1,
        "the waiter's place is queued and nobody holds the key"
    );
    let last = last_tokens(&backend, &set).await;
    let before = revision(&cluster).await;
    assert!(
        backend.try_acquire_all(&set, TTL).await.unwrap().is_none(),
        "a set overtook a queued waiter"
    );
    assert_eq!(
        revision(&cluster).await,
        before,
        "a refused set wrote to the store"
    );
    assert_untouched(&backend, &set, &last).await;
    backend.leave_queue(&set[1], waiter).await.unwrap();

    // In a read phase.
    let reader = OwnerId::random();
    let read = backend
        .try_acquire_shared(&set[2], reader, TTL)
        .await
        .unwrap()
        .unwrap();
    let last = last_tokens(&backend, &set[..2]).await;
    let before = revision(&cluster).await;
    assert!(
        backend.try_acquire_all(&set, TTL).await.unwrap().is_none(),
        "a set took a key in a read phase"
    );
    assert_eq!(
        revision(&cluster).await,
        before,
        "a refused set wrote to the store"
    );
    assert_untouched(&backend, &set[..2], &last).await;
    assert!(backend.release_shared(&read, reader).await.unwrap());

    // All free: granted.
    let leases = timeout(PATIENCE, async {
        loop {
            // The queued place may still be lapsing when `leave_queue`'s revoke ran in the
            // background.
            if let Some(leases) = backend.try_acquire_all(&set, TTL).await.unwrap() {
                return leases;
            }
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a set of free keys was refused");
    for lease in &leases {
        assert!(backend.release(lease).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_is_released_and_renewed_on_its_own() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend = cluster.lock_backend();
    let set = keys(&["m1", "m2", "m3"]);
    let leases = backend.try_acquire_all(&set, TTL).await.unwrap().unwrap();
    assert!(backend.release(&leases[0]).await.unwrap());
    assert_eq!(backend.inspect(&set[0]).await.unwrap().holder, None);
    // Another owner takes the released member while the rest of the set is held.
    let other = backend
        .try_acquire(&set[0], TTL)
        .await
        .unwrap()
        .expect("a released member is free");
    assert!(other.token > leases[0].token);
    // The others are still held, each renewed on its own (the same ttl, and another one,
    // which moves that member to a lease of its own).
    let extended = backend.extend(&leases[1], TTL).await.unwrap();
    assert_eq!(extended.token, leases[1].token);
    let moved = backend
        .extend(&leases[2], TTL + Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(moved.token, leases[2].token);
    for (key, lease) in [(&set[1], &extended), (&set[2], &moved)] {
        assert_eq!(
            backend.inspect(key).await.unwrap().holder,
            Some(lease.fence())
        );
    }
    // Releasing one does not touch the other.
    assert!(backend.release(&extended).await.unwrap());
    assert_eq!(
        backend.inspect(&set[2]).await.unwrap().holder,
        Some(moved.fence())
    );
    assert!(backend.release(&moved).await.unwrap());
    assert!(
        !backend.release(&leases[0]).await.unwrap(),
        "an old member's release freed the new holder"
    );
    assert!(backend.release(&other).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_never_grant_a_key_twice() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend: Arc<dyn LockBackend> = cluster.backend();
    let all = keys(&["o-a", "o-b", "o-c", "o-d"]);
    let inside: Arc<Vec<AtomicUsize>> = Arc::new(all.iter().map(|_| AtomicUsize::new(0)).collect());
    let tokens: Arc<Mutex<HashMap<LockKey, Vec<u64>>>> = Arc::default();
    let pairs = [vec![0, 1], vec![1, 2], vec![0, 2, 3], vec![2, 3]];
    let mut tasks = Vec::new();
    for members in pairs {
        let set: Vec<LockKey> = members.iter().map(|&i| all[i].clone()).collect();
        let (backend, inside, tokens) = (backend.clone(), inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let mut granted = 0;
            for _ in 0..30 {
                if let Some(leases) = backend.try_acquire_all(&set, TTL).await.unwrap() {
                    granted += 1;
                    for &i in &members {
                        assert_eq!(
                            inside[i].fetch_add(1, Ordering::SeqCst),
                            0,
                            "two sets held one key at once"
                        );
                    }
                    {
                        let mut tokens = tokens.lock().unwrap();
                        for lease in &leases {
                            tokens
                                .entry(lease.key.clone())
                                .or_default()
                                .push(lease.token.get());
                        }
                    }
                    sleep(Duration::from_millis(3)).await;
                    for &i in &members {
                        inside[i].fetch_sub(1, Ordering::SeqCst);
                    }
                    for lease in &leases {
                        assert!(backend.release(lease).await.unwrap());
                    }
                }
                sleep(Duration::from_millis(1)).await;
            }
            granted
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += timeout(PATIENCE, task)
            .await
            .expect("the set tries did not finish")
            .unwrap();
    }
    assert!(total > 0, "no set was ever granted");
    let granted = tokens.lock().unwrap().clone();
    for (key, mut seen) in granted {
        let count = seen.len();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), count, "a token of {key} was handed out twice");
        let last = backend
            .inspect(&key)
            .await
            .unwrap()
            .last_token
            .unwrap()
            .get();
        assert!(seen.iter().all(|&token| token <= last));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_too_large_for_one_transaction_is_taken_key_by_key() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend = cluster.lock_backend();
    let names: Vec<String> = (0..=MAX_SET_KEYS).map(|i| format!("big-{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let set = keys(&refs);
    let refused = backend.try_acquire_all(&set, TTL).await;
    assert!(
        matches!(refused, Err(Error::Unsupported { .. })),
        "{refused:?}"
    );
    assert_untouched(&backend, &set, &vec![None; set.len()]).await;
    // The locker takes such a set in the ordered form instead.
    let locker = Locker::new(cluster.backend());
    let held = locker
        .lock_all(set.iter().map(LockKey::as_str))
        .ttl(TTL)
        .watchdog(false)
        .await
        .unwrap();
    assert_eq!(held.keys().count(), set.len());
    assert!(held.release().await.unwrap());
    // The largest set of one transaction is granted in one step.
    let fits = backend
        .try_acquire_all(&set[..MAX_SET_KEYS], TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fits.len(), MAX_SET_KEYS);
    for lease in &fits {
        assert!(backend.release(lease).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sets_are_typed_errors() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend = cluster.lock_backend();
    let set = keys(&["e-a", "e-b"]);
    let unsorted = [set[1].clone(), set[0].clone()];
    assert!(matches!(
        backend.try_acquire_all(&unsorted, TTL).await,
        Err(Error::InvalidKey { .. })
    ));
    let doubled = [set[0].clone(), set[0].clone()];
    assert!(matches!(
        backend.try_acquire_all(&doubled, TTL).await,
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        backend.try_acquire_all(&set[..1], TTL).await,
        Err(Error::InvalidConfig { .. })
    ));
    assert!(matches!(
        backend
            .try_acquire_all(&set, Duration::from_millis(1))
            .await,
        Err(Error::InvalidTtl { .. })
    ));
    assert_untouched(&backend, &set, &[None, None]).await;
}

/// An etcd member of this test's own, started with `--max-txn-ops` lower than the default;
/// killed when dropped.
struct LowLimitEtcd {
    child: std::process::Child,
    client_port: u16,
    dir: std::path::PathBuf,
}

impl LowLimitEtcd {
    fn spawn(max_txn_ops: usize) -> Self {
        use fencelock_servers::port::free_port;
        let (client_port, peer_port) = (free_port().unwrap(), free_port().unwrap());
        let dir = std::env::temp_dir().join(format!("fencelock-sets-{}", OwnerId::random()));
        let (client, peer) = (
            format!("http://127.0.0.1:{client_port}"),
            format!("http://127.0.0.1:{peer_port}"),
        );
        let child = std::process::Command::new("etcd")
            .arg("--data-dir")
            .arg(&dir)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("default={peer}")])
            .args(["--max-txn-ops", &max_txn_ops.to_string()])
            .args(["--log-level", "warn", "--logger", "zap"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("etcd on PATH (scripts/test-deps)");
        LowLimitEtcd {
            child,
            client_port,
            dir,
        }
    }
}

impl Drop for LowLimitEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_a_lower_op_limit_refuses_the_set_as_unsupported() {
    let server = LowLimitEtcd::spawn(16);
    let config =
        fencelock_etcd::EtcdConfig::from_url(&format!("etcd://127.0.0.1:{}", server.client_port))
            .unwrap()
            .prefix("sets-limit");
    let cluster = timeout(PATIENCE, async {
        loop {
            match config.connect().await {
                Ok(cluster) => return cluster,
                Err(_) => sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("the etcd member did not start");
    let backend = cluster.lock_backend();
    // 5 keys: 20 compares, past this member's 16.
    let set = keys(&["l-1", "l-2", "l-3", "l-4", "l-5"]);
    let before = revision(&cluster).await;
    let refused = backend.try_acquire_all(&set, TTL).await;
    assert!(
        matches!(refused, Err(Error::Unsupported { .. })),
        "{refused:?}"
    );
    assert_eq!(
        revision(&cluster).await,
        before,
        "a refused set wrote to the store"
    );
    assert_untouched(&backend, &set, &[None; 5]).await;
    // The locker takes it key by key, and 4 keys (16 compares) fit in one step.
    let held = Locker::new(cluster.backend())
        .lock_all(set.iter().map(LockKey::as_str))
        .ttl(TTL)
        .watchdog(false)
        .await
        .unwrap();
    assert_eq!(held.keys().count(), 5);
    assert!(held.release().await.unwrap());
    let fits = backend
        .try_acquire_all(&set[..4], TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fits.len(), 4);
    for lease in &fits {
        assert!(backend.release(lease).await.unwrap());
    }
}
