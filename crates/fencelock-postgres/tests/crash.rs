//! Server crashes on a throwaway cluster (never the shared server): tokens granted after a crash
//! are above every token granted before it, for every key, through the lease backend, the
//! advisory backend and the transaction API; and a clean restart keeps leases.
//!
//! The cluster runs with `synchronous_commit = off` and a 10 s `wal_writer_delay`, so that a
//! commit which does not insist on its flush is likely lost in the crash: the new epoch must
//! be committed synchronously whatever the default, or tokens come back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock_core::{Error, FencingToken, LockBackend, LockKey};
use fencelock_postgres::{PgConfig, PgDatabase};
use fencelock_testkit::pg_cluster::PgCluster;
use tokio::time::Instant;

const KEYS: usize = 4;
const TTL: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(5);
/// How long the server may take to come back after a restart (crash recovery included) on a
/// loaded machine.
const BACK_WITHIN: Duration = Duration::from_secs(60);

const SETTINGS: &[&str] = &[
    "synchronous_commit = off",
    "wal_writer_delay = 10000ms",
    "max_connections = 100",
];

async fn cluster() -> Arc<PgCluster> {
    tokio::task::spawn_blocking(|| Arc::new(PgCluster::spawn(SETTINGS)))
        .await
        .unwrap()
}

async fn blocking(cluster: &Arc<PgCluster>, what: fn(&PgCluster)) {
    let cluster = cluster.clone();
    tokio::task::spawn_blocking(move || what(&cluster))
        .await
        .unwrap();
}

/// The databases of the ways in: a schema serves one lock backend, so the advisory backend
/// has a schema of its own; transactions share the lease backend's.
#[derive(Clone)]
struct Dbs {
    lease: PgDatabase,
    advisory: PgDatabase,
}

impl Dbs {
    async fn connect(cluster: &PgCluster) -> Self {
        Dbs {
            lease: connect_schema(cluster, "fl_crash").await,
            advisory: connect_schema(cluster, "fl_crash_advisory").await,
        }
    }

    fn of(&self, way: Way) -> &PgDatabase {
        match way {
            Way::Advisory => &self.advisory,
            Way::Lease | Way::Transaction => &self.lease,
        }
    }

    async fn close(&self) {
        self.lease.close().await;
        self.advisory.close().await;
    }
}

/// Where `way`'s tokens of `key` count: each schema has its own counters.
fn label(way: Way, key: &LockKey) -> String {
    match way {
        Way::Advisory => format!("advisory:{key}"),
        Way::Lease | Way::Transaction => format!("lease:{key}"),
    }
}

async fn connect(cluster: &PgCluster) -> PgDatabase {
    connect_schema(cluster, "fl_crash").await
}

async fn connect_schema(cluster: &PgCluster, schema: &str) -> PgDatabase {
    PgConfig::from_url(&format!("{}?pooler=none&schema={schema}", cluster.url()))
        .unwrap()
        .operation_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connecting to the throwaway cluster: {e}\n{}",
                cluster.log()
            )
        })
}

fn key(i: usize) -> LockKey {
    LockKey::new(format!("crash/{i}")).unwrap()
}

#[derive(Debug, Clone, Copy)]
enum Way {
    Lease,
    Advisory,
    Transaction,
}

const WAYS: [Way; 3] = [Way::Lease, Way::Advisory, Way::Transaction];

/// One grant of `key` through `way` (released or committed at once): `Ok(None)` when the
/// lock was busy.
async fn grant(dbs: &Dbs, way: Way, key: &LockKey) -> Result<Option<FencingToken>, Error> {
    let db = dbs.of(way);
    let backend: Arc<dyn LockBackend> = match way {
        Way::Lease => Arc::new(db.lease_backend()),
        Way::Advisory => Arc::new(db.advisory_backend()),
        Way::Transaction => {
            return db
                .storage()
                .transaction_with(key, WAIT, async |tx| -> Result<_, Error> {
                    Ok(Some(tx.token()))
                })
                .await;
        }
    };
    let Some(lease) = backend.try_acquire(key, TTL).await? else {
        return Ok(None);
    };
    // A release lost in the crash is fine: the lease is gone with the volatile state.
    let _ = backend.release(&lease).await;
    Ok(Some(lease.token))
}

/// Every token a client saw granted, per key.
type Seen = Arc<Mutex<HashMap<String, Vec<FencingToken>>>>;

fn record(seen: &Seen, label: String, token: FencingToken) {
    seen.lock().unwrap().entry(label).or_default().push(token);
}

/// Grants in a loop through `way`, over every key, until `stop`; errors (the crash) are
/// ignored, every token received is recorded.
async fn keep_granting(db: Dbs, way: Way, seen: Seen, stop: Arc<AtomicBool>) {
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let key = key(i % KEYS);
        i += 1;
        match grant(&db, way, &key).await {
            Ok(Some(token)) => record(&seen, label(way, &key), token),
            Ok(None) => {}
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// A grant of `key` through `way` once the server is back, retrying while it is not.
async fn grant_when_back(db: &Dbs, way: Way, key: &LockKey) -> FencingToken {
    let deadline = Instant::now() + BACK_WITHIN;
    loop {
        match grant(db, way, key).await {
            Ok(Some(token)) => return token,
            outcome if Instant::now() < deadline => {
                drop(outcome);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            outcome => panic!("{way:?} grant of {key} after the restart: {outcome:?}"),
        }
    }
}

/// Starts the crashed cluster and grants every key through every way in: each new token is
/// above every token any client saw before the crash.
async fn restart_and_check(cluster: &Arc<PgCluster>, db: &Dbs, seen: &Seen, when: &str) {
    let before: HashMap<String, FencingToken> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(key, tokens)| (key.clone(), tokens.iter().max().copied().unwrap()))
        .collect();
    assert_eq!(before.len(), 2 * KEYS, "{when}: some key was never granted");
    blocking(cluster, PgCluster::start).await;
    for i in 0..KEYS {
        let key = key(i);
        for way in WAYS {
            let highest = before[&label(way, &key)];
            let token = grant_when_back(db, way, &key).await;
            assert!(
                token > highest,
                "{when}: {way:?} granted {key} token {token} after the crash, not above \
                 {highest} granted before it"
            );
            record(seen, label(way, &key), token);
        }
    }
}

/// Three crashes with grants in flight on every way in, each followed at once by a second
/// crash right after the first grants of the new epoch (whose start must be on disk by then):
/// after each restart, every key's new tokens (through each way) are above every token any
/// client saw before the crash, and no token is ever seen twice for a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_after_a_crash_are_above_every_token_before_it() {
    let cluster = cluster().await;
    let db = Dbs::connect(&cluster).await;
    let seen: Seen = Arc::default();
    for round in 0..3 {
        let stop = Arc::new(AtomicBool::new(false));
        let mut clients = tokio::task::JoinSet::new();
        for way in WAYS {
            for _ in 0..2 {
                clients.spawn(keep_granting(db.clone(), way, seen.clone(), stop.clone()));
            }
        }
        // Let them grant a while, then crash under them.
        tokio::time::sleep(Duration::from_millis(400)).await;
        blocking(&cluster, PgCluster::crash).await;
        stop.store(true, Ordering::Relaxed);
        while let Some(client) = clients.join_next().await {
            client.unwrap();
        }
        restart_and_check(&cluster, &db, &seen, &format!("round {round}")).await;
        // The new epoch was started by the grants just made, and little WAL followed it.
        blocking(&cluster, PgCluster::crash).await;
        restart_and_check(&cluster, &db, &seen, &format!("round {round}, quick crash")).await;
    }
    for (key, tokens) in seen.lock().unwrap().iter() {
        let mut sorted = tokens.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            tokens.len(),
            "{key}: a token was granted twice"
        );
    }
    db.close().await;
}

/// A clean shutdown writes the UNLOGGED tables out: a lease held across `pg_ctl stop -m fast`
/// and a start is still held (the capability `locks_survive_restart` says so), it can be
/// extended, and the next token of the key follows it in the same epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_restart_keeps_leases() {
    let cluster = cluster().await;
    let db = connect(&cluster).await;
    let backend = db.lease_backend();
    assert!(backend.capabilities().locks_survive_restart);
    let key = key(0);
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    blocking(&cluster, PgCluster::stop).await;
    blocking(&cluster, PgCluster::start).await;
    let deadline = Instant::now() + BACK_WITHIN;
    let info = loop {
        match backend.inspect(&key).await {
            Ok(info) => break info,
            Err(e) if Instant::now() < deadline => {
                drop(e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("inspect after the restart: {e}"),
        }
    };
    assert_eq!(
        info.holder,
        Some(lease.fence()),
        "the lease did not survive"
    );
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());
    let extended = backend.extend(&lease, TTL).await.unwrap();
    assert!(backend.release(&extended).await.unwrap());
    let next = backend.try_acquire(&key, TTL).await.unwrap().unwrap().token;
    assert_eq!(
        next.get(),
        lease.token.get() + 1,
        "the epoch changed in a clean restart"
    );
    db.close().await;
}

/// Lowering a fence after a crash (which empties the UNLOGGED counters) never goes below a
/// token that was granted: tokens 1-3 granted and 3 admitted, the fence cannot be lowered to
/// 1 before the crash nor after it, so the holder of token 2 stays refused. The refusal after
/// the crash names the lowest fence allowed, the end of the epoch the tokens came from, and
/// the next grant (the first of a new epoch) is above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_lowered_after_a_crash_admits_no_granted_token_again() {
    let cluster = cluster().await;
    let db = connect(&cluster).await;
    let backend = db.lease_backend();
    let key = key(0);
    let mut grants = Vec::new();
    for _ in 0..3 {
        let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
        assert!(backend.release(&lease).await.unwrap());
        grants.push(lease);
    }
    let fence = db.fence();
    let mut tx = db.pool().begin().await.unwrap();
    fence
        .admit(&mut *tx, key.as_str(), grants[2].fence())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let lowered = fence.lower_fence(db.pool(), &key, grants[0].token).await;
    assert!(
        matches!(lowered, Err(Error::InvalidConfig { .. })),
        "before the crash: {lowered:?}"
    );
    // The cluster does not wait for commits to reach disk: make the admitted fence durable,
    // as a server with the default synchronous_commit would have at the commit.
    sqlx::query("CHECKPOINT").execute(db.pool()).await.unwrap();
    db.close().await;

    blocking(&cluster, PgCluster::crash).await;
    blocking(&cluster, PgCluster::start).await;
    let db = connect(&cluster).await;
    let fence = db.fence();
    let lowered = fence.lower_fence(db.pool(), &key, grants[0].token).await;
    let Err(Error::InvalidConfig { message, .. }) = lowered else {
        panic!("after the crash the fence was lowered below a granted token: {lowered:?}");
    };
    assert!(message.contains("lost"), "{message}");
    let mut tx = db.pool().begin().await.unwrap();
    let stale = fence.admit(&mut *tx, key.as_str(), grants[1].fence()).await;
    assert!(matches!(stale, Err(Error::Stale { .. })), "{stale:?}");
    drop(tx);

    // The lowest fence it names is the end of the tokens' epoch, and the next grant is above.
    let end = (((grants[2].token.get() >> 32) + 1) << 32) - 1;
    assert!(message.contains(&end.to_string()), "{message}");
    // `inspect` says the last token is unknown and gives the same bound, on both backends
    // (they share the counters and the epochs), so an operator has the figure to lower to.
    let backend = db.lease_backend();
    for info in [
        backend.inspect(&key).await.unwrap(),
        db.advisory_backend().inspect(&key).await.unwrap(),
    ] {
        assert_eq!(info.last_token, None, "{info:?}");
        assert_eq!(info.granted_at_most.map(|t| t.get()), Some(end), "{info:?}");
    }
    let next = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(next.token.get() > end, "{} is not above {end}", next.token);
    let mut tx = db.pool().begin().await.unwrap();
    fence
        .admit(&mut *tx, key.as_str(), next.fence())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(info.last_token, Some(next.token), "{info:?}");
    assert_eq!(info.granted_at_most, None, "{info:?}");
    db.close().await;
}
