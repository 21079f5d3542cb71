//! Tokens no lock service granted (DESIGN 5.3, "Fence your own tables"): an admit of a token
//! above what this schema's counter granted for the key is refused; a resource fenced past
//! every grant by a token that could not be checked (another service's) is healed by
//! lowering its fence.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{Error, Fence, FencingToken, LockBackend, LockKey, Locker, OwnerId};
use fencelock_memory::MemoryLockBackend;
use fencelock_postgres::FenceParams;

const TTL: Duration = Duration::from_secs(30);
const NEVER_GRANTED: u64 = i64::MAX as u64;

fn forged() -> Fence {
    Fence::new(FencingToken::new(NEVER_GRANTED).unwrap(), OwnerId::random())
}

/// The lease backend's counter is in the fence's own schema: a token above its last grant of
/// the key is refused with `InvalidConfig` naming the key and both tokens, and records
/// nothing, so the real holder is still admitted. (Before the check the forged token was
/// admitted and every real holder of the resource refused from then on.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_the_schemas_counter_never_granted_is_refused() {
    let s = common::split().await;
    let fence = s.db.fence();
    let backend = s.db.lease_backend();
    let key = LockKey::new("account/10").unwrap();
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let granted = lease.token.get();

    match fence.admit(&s.pool, &key, forged()).await {
        Err(error @ Error::InvalidConfig { .. }) => {
            let text = error.to_string();
            for part in [
                "account/10",
                &NEVER_GRANTED.to_string(),
                &granted.to_string(),
            ] {
                assert!(text.contains(part), "{part:?} missing from {text}");
            }
            assert!(!error.is_retryable());
        }
        other => panic!("expected the forged token to be refused, got {other:?}"),
    }
    assert_eq!(fence.current(&s.pool, &key).await.unwrap(), None);
    fence.admit(&s.pool, &key, lease.fence()).await.unwrap();
    // The granted token itself, and the same one again, are admitted.
    fence.admit(&s.pool, &key, lease.fence()).await.unwrap();
    assert!(backend.release(&lease).await.unwrap());

    // From plain SQL the same: SQLSTATE FL008.
    let p = FenceParams::try_from(forged()).unwrap();
    let refused = sqlx::query(&format!(
        "SELECT {}.fencelock_admit('account/10', $1, $2)",
        s.locks.name()
    ))
    .bind(p.token)
    .bind(&p.owner[..])
    .execute(&s.pool)
    .await
    .unwrap_err();
    match &refused {
        sqlx::Error::Database(db) => assert_eq!(db.code().as_deref(), Some("FL008")),
        other => panic!("{other:?}"),
    }
    s.app.cleanup().await;
    s.locks.cleanup().await;
}

/// Another service's tokens cannot be checked: a forged one is admitted, after which the real
/// holders are refused. `fencelock_lower_fence` (here through `PgFence::lower_fence` and once
/// as the plain SQL an operator runs) lowers the fence to the service's last grant: the holders
/// granted so far stay refused, the next grant is admitted. It only lowers, and never below
/// what this schema's own counter granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_the_fence_heals_a_resource_fenced_past_every_grant() {
    let s = common::split().await;
    let fence = s.db.fence();
    let locker = Locker::new(MemoryLockBackend::new());
    let key = LockKey::new("ext/1").unwrap();
    let first = locker.lock("ext/1").ttl(TTL).watchdog(false).await.unwrap();
    fence.admit(&s.pool, &key, first.fence()).await.unwrap();
    fence.admit(&s.pool, &key, forged()).await.unwrap();
    assert!(matches!(
        fence.admit(&s.pool, &key, first.fence()).await,
        Err(Error::Stale { .. })
    ));
    let last = first.fence().token;

    // Only lowers.
    assert!(matches!(
        fence
            .lower_fence(&s.pool, &key, FencingToken::new(NEVER_GRANTED).unwrap())
            .await,
        Err(Error::InvalidConfig { .. })
    ));
    // The operator's step, in plain SQL.
    let was: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT {}.fencelock_lower_fence('ext/1', $1)",
        s.locks.name()
    ))
    .bind(i64::try_from(last).unwrap())
    .fetch_one(&s.pool)
    .await
    .unwrap();
    assert_eq!(was, Some(i64::MAX));
    // The holder granted so far, the last grant included, stays refused ...
    assert!(matches!(
        fence.admit(&s.pool, &key, first.fence()).await,
        Err(Error::Stale { .. })
    ));
    first.release().await.unwrap();
    // ... and the next grant is admitted.
    let next = locker.lock("ext/1").ttl(TTL).await.unwrap();
    assert!(next.fence().token > last);
    fence.admit(&s.pool, &key, next.fence()).await.unwrap();
    next.release().await.unwrap();
    assert_eq!(
        fence
            .lower_fence(&s.pool, &LockKey::new("nothing/here").unwrap(), last)
            .await
            .unwrap(),
        None
    );

    // A key of this schema's own counter: never lowered below its last grant.
    let backend = s.db.lease_backend();
    let own = LockKey::new("account/12").unwrap();
    for _ in 0..2 {
        let lease = backend.try_acquire(&own, TTL).await.unwrap().unwrap();
        fence.admit(&s.pool, &own, lease.fence()).await.unwrap();
        assert!(backend.release(&lease).await.unwrap());
    }
    let recorded = fence.current(&s.pool, &own).await.unwrap().unwrap().token;
    let below = FencingToken::new(recorded.get() - 1).unwrap();
    match fence.lower_fence(&s.pool, &own, below).await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("account/12"), "{message}");
            assert!(message.contains(&recorded.get().to_string()), "{message}");
        }
        other => panic!("expected a refusal to lower below the counter, got {other:?}"),
    }
    s.app.cleanup().await;
    s.locks.cleanup().await;
}
