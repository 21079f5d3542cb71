//! The connection budget (DESIGN 5.3, *Connections of one process*): however many waiters
//! one process has on a hot key, it holds no more connections to the server than its pool
//! sizes and the listener allow, `pool_size + 1` on the lease backend and
//! `pool_size + holder_pool_size + 1` on the advisory one (plus one diagnostic connect, only
//! while a checkout times out). Counted in `pg_stat_activity` by the process's own
//! `application_name`, while 256 waiters queue behind a holder and while the lock is handed
//! down to them. And holders' renewals keep a share of the pool that grant tries never take.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fencelock_core::{LockBackend, LockKey, Locker, OwnerId};
use fencelock_postgres::{PgBackendKind, PgConfig};
use fencelock_testkit::postgres::{PgSchema, pg_url};
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

const WAITERS: usize = 256;
const POOL: u32 = 4;
const HOLDERS: u32 = 6;

async fn connections(admin: &PgPool, name: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
        .bind(name)
        .fetch_one(admin)
        .await
        .unwrap()
}

/// The most connections of `name` seen every 20 ms until `until`.
async fn most_until(admin: &PgPool, name: &str, until: Instant) -> i64 {
    let mut most = 0;
    while Instant::now() < until {
        most = most.max(connections(admin, name).await);
        sleep(Duration::from_millis(20)).await;
    }
    most
}

async fn budget_holds(kind: PgBackendKind, budget: i64) {
    let schema = PgSchema::create().await;
    let name = format!("fl-budget-{}", OwnerId::random());
    let backend = match kind {
        PgBackendKind::Advisory => "advisory",
        _ => "lease",
    };
    let db = PgConfig::from_url(&format!(
        "{}?schema={}&backend={backend}&application_name={name}",
        pg_url(),
        schema.name()
    ))
    .unwrap()
    .pool_size(POOL)
    .holder_pool_size(HOLDERS)
    .connect()
    .await
    .unwrap();
    let locker = Locker::new(db.lock_backend(kind));
    let key = format!("budget/{name}");
    let holder = locker
        .lock(&key)
        .ttl(Duration::from_secs(60))
        .await
        .unwrap();
    let (granted, mut grants) = mpsc::unbounded_channel();
    for _ in 0..WAITERS {
        let (locker, key, granted) = (locker.clone(), key.clone(), granted.clone());
        tokio::spawn(async move {
            let guard = locker
                .lock(&key)
                .ttl(Duration::from_secs(60))
                .wait(Duration::from_secs(240))
                .await
                .expect("a waiter was not granted");
            granted.send(guard).unwrap();
        });
    }
    let queued = most_until(
        schema.admin(),
        &name,
        Instant::now() + Duration::from_secs(3),
    )
    .await;
    assert!(
        queued <= budget,
        "{kind:?}: {queued} connections while {WAITERS} waiters queued (budget {budget})"
    );
    holder.release().await.unwrap();
    let hand_down = tokio::spawn(async move {
        for _ in 0..WAITERS {
            let guard = tokio::time::timeout(Duration::from_secs(240), grants.recv())
                .await
                .expect("the hand-down stalled")
                .unwrap();
            guard.release().await.unwrap();
        }
    });
    let mut handed = 0;
    while !hand_down.is_finished() {
        handed = handed.max(connections(schema.admin(), &name).await);
        sleep(Duration::from_millis(20)).await;
    }
    hand_down.await.unwrap();
    assert!(
        handed <= budget,
        "{kind:?}: {handed} connections while the lock went down the queue (budget {budget})"
    );
    db.close().await;
    schema.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_backend_keeps_its_connection_budget() {
    // The pool, the listener, and one diagnostic connect at most.
    budget_holds(PgBackendKind::Lease, i64::from(POOL) + 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advisory_backend_keeps_its_connection_budget() {
    budget_holds(PgBackendKind::Advisory, i64::from(POOL + HOLDERS) + 2).await;
}

/// Grant tries of one process blocked in the server, as many as the pool has connections and
/// more, leave a holder of the lease backend a connection to extend its lease with (DESIGN
/// 5.3, *Connections of one process*). The tries block on an `ACCESS EXCLUSIVE` lock of the
/// queue's places, which every try reads and an extend does not; before the reserve, the
/// extend queued behind them for the pool and timed out, and the lease lapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_tries_leave_holders_a_connection_to_extend_with() {
    let schema = PgSchema::create().await;
    let db = PgConfig::from_url(&format!("{}?schema={}", pg_url(), schema.name()))
        .unwrap()
        .pool_size(POOL)
        .operation_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap();
    let backend: Arc<dyn LockBackend> = Arc::new(db.lock_backend(PgBackendKind::Lease));
    let held = LockKey::new("reserve/held").unwrap();
    let lease = backend
        .try_acquire(&held, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("the free key was not granted");

    let mut blocker = schema.admin().begin().await.unwrap();
    sqlx::query(&format!(
        "LOCK TABLE {}.fencelock_lease_places IN ACCESS EXCLUSIVE MODE",
        schema.name()
    ))
    .execute(&mut *blocker)
    .await
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tries = Vec::new();
    for i in 0..4 * POOL {
        let (backend, stop) = (backend.clone(), stop.clone());
        tries.push(tokio::spawn(async move {
            let key = LockKey::new(format!("reserve/try-{i}")).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let _ = backend.try_acquire(&key, Duration::from_secs(60)).await;
            }
        }));
    }
    // Every connection the tries may take is blocked in the server, and a moment more for
    // any they could take beyond it.
    let blocked = format!(
        "SELECT count(*) FROM pg_locks WHERE NOT granted \
          AND relation = '{}.fencelock_lease_places'::regclass",
        schema.name()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: i64 = sqlx::query_scalar(&blocked)
            .fetch_one(schema.admin())
            .await
            .unwrap();
        if waiting >= i64::from(POOL - 1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {waiting} grant tries blocked on the places after 30 s"
        );
        sleep(Duration::from_millis(20)).await;
    }
    sleep(Duration::from_millis(500)).await;

    let extended = backend.extend(&lease, Duration::from_secs(60)).await;
    let waiting: i64 = sqlx::query_scalar(&blocked)
        .fetch_one(schema.admin())
        .await
        .unwrap();
    blocker.rollback().await.unwrap();
    stop.store(true, Ordering::Relaxed);
    for t in tries {
        t.await.unwrap();
    }
    let extended = extended.unwrap_or_else(|e| {
        panic!("the holder's extend failed with {waiting} grant tries blocked in the server: {e}")
    });
    assert_eq!(extended.token, lease.token);
    assert!(
        backend.release(&extended).await.unwrap(),
        "the extended lease was not live at its release"
    );
    db.close().await;
    schema.cleanup().await;
}
