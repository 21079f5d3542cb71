//! `fencelock_admit` bounds the transaction it fences (DESIGN 5.3, "Fence your own tables"):
//! a holder that admits and then pauses has its transaction ended by the server within the
//! idle bound, its commit fails, and its successor's admit proceeds; a successor never waits
//! for the fence record past its own bound, and says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{Error, Fence, FencingToken, LockKey, OwnerId};
use fencelock_postgres::{FenceParams, map_sqlx_error};
use sqlx::{Connection, PgPool};

/// The idle bound of the paused holder's transaction.
const IDLE: Duration = Duration::from_secs(1);
/// How long the holder pauses: well past the idle bound, and past the time its successor
/// needs once the holder's session is gone.
const PAUSE: Duration = Duration::from_secs(4);

fn fence_of(token: u64) -> Fence {
    Fence::new(FencingToken::new(token).unwrap(), OwnerId::random())
}

async fn create_notes(pool: &PgPool) {
    sqlx::query("CREATE TABLE notes (id bigserial PRIMARY KEY, token bigint NOT NULL)")
        .execute(pool)
        .await
        .unwrap();
}

async fn note(conn: &mut sqlx::PgConnection, fence: Fence) {
    sqlx::query("INSERT INTO notes (token) VALUES ($1)")
        .bind(FenceParams::try_from(fence).unwrap().token)
        .execute(conn)
        .await
        .unwrap();
}

async fn notes(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar("SELECT token FROM notes ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
}

/// The paused holder: its admit set the transaction's idle bound, the server ends the session
/// once the bound passes, the successor's admit (which was waiting on the fence record) goes
/// through long before the pause ends, and the holder's commit fails: nothing it wrote after
/// its admit is in the table. Without the bound the successor waits for the whole pause and
/// the paused transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_transaction_is_ended_and_its_successor_admitted() {
    let s = common::split().await;
    create_notes(&s.pool).await;
    let db = s.db.clone().with_idle_in_transaction_timeout(IDLE);
    let fence = db.fence();
    let key = LockKey::new("account/10").unwrap();
    let (older, newer) = (fence_of(5), fence_of(6));

    let mut paused = s.pool.begin().await.unwrap();
    fence.admit(&mut *paused, &key, older).await.unwrap();
    note(&mut paused, older).await;

    let (f, k, pool) = (fence.clone(), key.clone(), s.pool.clone());
    let successor = tokio::spawn(async move {
        let mut tx = pool.begin().await.unwrap();
        f.admit(&mut *tx, &k, newer).await?;
        note(&mut tx, newer).await;
        tx.commit().await.map_err(|e| map_sqlx_error("app", e))
    });

    // The holder pauses, sending nothing, for much longer than its idle bound.
    tokio::time::sleep(PAUSE).await;
    assert!(
        successor.is_finished(),
        "the successor's admit still waits for the paused holder after {PAUSE:?}"
    );
    successor.await.unwrap().unwrap();
    match paused.commit().await {
        Err(e) => {
            let error = map_sqlx_error("app", e);
            assert!(
                matches!(error, Error::Unavailable { .. }),
                "the ended session's commit should be Unavailable, got {error:?}"
            );
        }
        Ok(()) => panic!("the paused transaction committed after its idle bound"),
    }
    assert_eq!(
        notes(&s.pool).await,
        vec![6],
        "only the successor's write is there"
    );
    assert_eq!(fence.current(&s.pool, &key).await.unwrap(), Some(newer));
    s.app.cleanup().await;
    s.locks.cleanup().await;
}

/// From plain SQL (psql), `fencelock_admit` takes the bound from the setting
/// `fencelock.admit_idle_timeout`, and a stricter bound the session already has is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_admit_takes_its_idle_bound_from_a_setting() {
    let s = common::split().await;
    let admit = format!("SELECT {}.fencelock_admit('sql/1', $1, $2)", s.locks.name());
    let show = "SELECT current_setting('idle_in_transaction_session_timeout')";
    let mut conn = s.pool.acquire().await.unwrap();
    for (session, setting, expected) in [
        ("0", None, "30s"),
        ("0", Some("1500ms"), "1500ms"),
        ("700ms", Some("1500ms"), "700ms"),
    ] {
        sqlx::query(&format!(
            "SET idle_in_transaction_session_timeout = '{session}'"
        ))
        .execute(&mut *conn)
        .await
        .unwrap();
        let reset = "RESET fencelock.admit_idle_timeout".to_owned();
        let set = setting
            .map(|value| format!("SET fencelock.admit_idle_timeout = '{value}'"))
            .unwrap_or(reset);
        sqlx::query(&set).execute(&mut *conn).await.unwrap();
        let mut tx = conn.begin().await.unwrap();
        let p = FenceParams::try_from(fence_of(1)).unwrap();
        sqlx::query(&admit)
            .bind(p.token)
            .bind(&p.owner[..])
            .execute(&mut *tx)
            .await
            .unwrap();
        let bound: String = sqlx::query_scalar(show).fetch_one(&mut *tx).await.unwrap();
        assert_eq!(bound, expected, "session {session}, setting {setting:?}");
        tx.rollback().await.unwrap();
        // Transaction-local: the session's own value is back.
        let after: String = sqlx::query_scalar(show)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(after, session);
    }
    sqlx::query("RESET ALL").execute(&mut *conn).await.unwrap();
    drop(conn);

    // Ended within the bound: the commit fails.
    let mut conn = s.pool.acquire().await.unwrap();
    sqlx::query("SET fencelock.admit_idle_timeout = '1s'")
        .execute(&mut *conn)
        .await
        .unwrap();
    let mut tx = conn.begin().await.unwrap();
    let p = FenceParams::try_from(fence_of(2)).unwrap();
    sqlx::query(&admit)
        .bind(p.token)
        .bind(&p.owner[..])
        .execute(&mut *tx)
        .await
        .unwrap();
    tokio::time::sleep(PAUSE).await;
    assert!(tx.commit().await.is_err(), "the idle transaction committed");
    drop(conn);
    s.app.cleanup().await;
    s.locks.cleanup().await;
}

/// A successor whose predecessor holds the fence record past the successor's wait (here the
/// predecessor has no idle bound at all) gets a retryable `Conflict` naming the resource from
/// the server, not a hang; once the predecessor ends, the successor's next try is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_waits_for_the_fence_record_within_its_bound() {
    let s = common::split().await;
    let unbounded =
        s.db.clone()
            .with_idle_in_transaction_timeout(Duration::ZERO);
    let fence = s.db.fence();
    let key = LockKey::new("account/11").unwrap();
    let (older, newer) = (fence_of(5), fence_of(6));
    let mut holder = s.pool.begin().await.unwrap();
    unbounded
        .fence()
        .admit(&mut *holder, &key, older)
        .await
        .unwrap();

    let mut tx = s.pool.begin().await.unwrap();
    let started = std::time::Instant::now();
    let refused = fence.admit(&mut *tx, &key, newer).await;
    let waited = started.elapsed();
    match &refused {
        Err(error @ Error::Conflict { message, .. }) => {
            assert!(error.is_retryable());
            assert!(message.contains("account/11"), "{message}");
        }
        other => panic!("expected Conflict after the fence record's wait, got {other:?}"),
    }
    assert!(
        waited < s.db.operation_timeout() + Duration::from_secs(5),
        "the wait took {waited:?}"
    );
    tx.rollback().await.unwrap();

    holder.commit().await.unwrap();
    let mut tx = s.pool.begin().await.unwrap();
    fence.admit(&mut *tx, &key, newer).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(fence.current(&s.pool, &key).await.unwrap(), Some(newer));
    s.app.cleanup().await;
    s.locks.cleanup().await;
}
