//! Failover to a standby that lacks the last epoch: a promoted standby starts a higher
//! timeline, and its tokens are above every token its old primary handed out (DESIGN 5.3,
//! *Tokens*), on real throwaway clusters (`initdb`, `pg_basebackup`, `pg_ctl promote`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{FencingToken, LockBackend, LockKey};
use fencelock_postgres::{PgConfig, PgDatabase};
use fencelock_testkit::pg_cluster::PgCluster;

const TTL: Duration = Duration::from_secs(30);
/// How long a synchronous commit may take to show as waiting for the stopped standby, on a
/// loaded machine.
const WAIT_SHOWS_WITHIN: Duration = Duration::from_secs(120);
const SCHEMA: &str = "fl_failover";

async fn blocking<T: Send + 'static>(what: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(what).await.unwrap()
}

async fn connect(cluster: &PgCluster) -> PgDatabase {
    PgConfig::from_url(&format!("{}?pooler=none&schema={SCHEMA}", cluster.url()))
        .unwrap()
        // A grant whose epoch commit waits for the standby waits until it is cancelled.
        .operation_timeout(WAIT_SHOWS_WITHIN * 2)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connecting to a throwaway cluster: {e}\n{}", cluster.log()))
}

async fn granted(db: PgDatabase, key: LockKey) -> FencingToken {
    let backend = db.lease_backend();
    let lease = backend
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .expect("granted");
    assert!(backend.release(&lease).await.unwrap());
    lease.token
}

/// With a synchronous standby: the volatile state is lost, the standby
/// stops, the next grant's epoch commit waits for the standby and an operator cancels the wait
/// (the commit stays, locally); grants go on in that epoch; the primary crashes and the
/// standby, which never received that epoch, is promoted. Its grants are above every token
/// the old primary handed out (before this, it started the same epoch again and handed out
/// the same tokens).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_standby_hands_out_none_of_its_old_primarys_tokens() {
    let primary =
        Arc::new(blocking(|| PgCluster::spawn(&["synchronous_standby_names = 'standby1'"])).await);
    let standby = {
        let primary = primary.clone();
        // Promoted, it must not wait for a synchronous standby of its own.
        Arc::new(
            blocking(move || {
                primary.spawn_standby("standby1", &["synchronous_standby_names = ''"])
            })
            .await,
        )
    };
    let db = connect(&primary).await;
    let key = LockKey::new("failover").unwrap();
    let replicated = granted(db.clone(), key.clone()).await;

    // The volatile state is lost (as in a crash); a TRUNCATE is logged, so it runs while the
    // standby still confirms commits.
    // The transaction says it forgets the counters on purpose (migration 20 refuses it else).
    sqlx::raw_sql(&format!(
        "BEGIN; SET LOCAL fencelock.forget_counters = on; \
         TRUNCATE {SCHEMA}.fencelock_epoch_live, {SCHEMA}.fencelock_counters; COMMIT"
    ))
    .execute(db.pool())
    .await
    .unwrap();
    {
        let standby = standby.clone();
        blocking(move || standby.stop()).await;
    }
    let waiting = tokio::spawn(granted(db.clone(), key.clone()));
    let started = tokio::time::Instant::now();
    loop {
        let cancelled: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
        )
        .fetch_all(db.pool())
        .await
        .unwrap();
        if cancelled.contains(&true) {
            break;
        }
        assert!(
            started.elapsed() < WAIT_SHOWS_WITHIN,
            "no commit waited for the stopped synchronous standby"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = waiting.await.unwrap();
    let second = granted(db.clone(), key.clone()).await;
    assert!(replicated < first && first < second);
    db.close().await;

    {
        let primary = primary.clone();
        blocking(move || primary.crash()).await;
    }
    {
        let standby = standby.clone();
        blocking(move || {
            standby.start();
            standby.promote();
        })
        .await;
    }
    let promoted = connect(&standby).await;
    let after = granted(promoted.clone(), key.clone()).await;
    assert!(
        after > second,
        "the promoted standby handed out {after}, not above {second} of its old primary \
         (tokens before the cancelled wait: {replicated}, after: {first}, {second})"
    );
    let again = granted(promoted.clone(), key.clone()).await;
    assert!(again > after);
    promoted.close().await;
}
