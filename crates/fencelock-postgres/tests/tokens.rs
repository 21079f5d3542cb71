//! Tokens as epoch * 2^32 + counter (DESIGN 5.3): a rolled-back transaction's token is used up,
//! a key's counter running out and the volatile state being lost both start a greater epoch,
//! the epoch is committed synchronously, advance_token across epochs, and tokens handed out
//! before the epoch migration stay below every new one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{Error, FencedStorage, FencingToken, LockBackend, LockKey};
use fencelock_postgres::{PgDatabase, PgStorage};
use fencelock_testkit::postgres::{PgSchema, pg_options};
use sqlx::{Connection, Executor};

const WAIT: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(30);
const COUNTER_BITS: u32 = 32;
const LAST_COUNTER: u64 = (1 << COUNTER_BITS) - 1;

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

fn epoch_of(token: FencingToken) -> u64 {
    token.get() >> COUNTER_BITS
}

/// How a transaction in these tests ends: rolled back on purpose with its token, or failed.
#[derive(Debug)]
enum Ended {
    RolledBack(FencingToken),
    Failed(Error),
}

impl From<Error> for Ended {
    fn from(error: Error) -> Self {
        Ended::Failed(error)
    }
}

/// Runs a transaction on `key` that rolls back, returning the token it held.
async fn rolled_back(storage: &PgStorage, key: &LockKey) -> FencingToken {
    let resource = key.clone();
    let outcome: Result<(), Ended> = storage
        .transaction(key, WAIT, move |tx| {
            Box::pin(async move {
                tx.write(&resource, b"never").await?;
                Err(Ended::RolledBack(tx.token()))
            })
        })
        .await;
    match outcome {
        Err(Ended::RolledBack(token)) => token,
        Err(Ended::Failed(error)) => panic!("the transaction failed: {error}"),
        Ok(()) => panic!("the transaction committed"),
    }
}

/// A committed transaction on `key` (through `transaction_with`), returning its token.
async fn committed(storage: &PgStorage, key: &LockKey) -> FencingToken {
    storage
        .transaction_with(key, WAIT, async |tx| -> Result<FencingToken, Error> {
            Ok(tx.token())
        })
        .await
        .unwrap()
}

async fn granted(backend: &dyn LockBackend, key: &LockKey) -> FencingToken {
    let lease = backend
        .try_acquire(key, TTL)
        .await
        .unwrap()
        .expect("a free lock");
    backend.release(&lease).await.unwrap();
    lease.token
}

/// One grant of `key` through each of the three ways in: lease, advisory, transaction.
async fn grant_each_way(db: &PgDatabase, key: &LockKey) -> [FencingToken; 3] {
    [
        granted(&db.lease_backend(), key).await,
        granted_advisory(db, key).await,
        committed(&db.storage(), key).await,
    ]
}

/// A grant through the advisory backend in `db`'s schema. A schema serves one lock backend:
/// the binding is switched the documented way (its row deleted while no lock is held) and a
/// database of its own takes the grant, then the binding is dropped again for the lease
/// grants that follow.
async fn granted_advisory(db: &PgDatabase, key: &LockKey) -> FencingToken {
    unbind(db).await;
    let advisory = PgDatabase::from_pool(db.pool().clone(), db.schema()).unwrap();
    let token = granted(&advisory.advisory_backend(), key).await;
    unbind(db).await;
    token
}

async fn unbind(db: &PgDatabase) {
    sqlx::query(&format!(
        "DELETE FROM \"{}\".fencelock_mechanism",
        db.schema()
    ))
    .execute(db.pool())
    .await
    .unwrap();
}

async fn live_epoch(db: &PgDatabase) -> Option<i64> {
    sqlx::query_scalar(&format!(
        "SELECT epoch FROM \"{}\".fencelock_epoch_live",
        db.schema()
    ))
    .fetch_optional(db.pool())
    .await
    .unwrap()
}

async fn durable_epoch(db: &PgDatabase) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT epoch FROM \"{}\".fencelock_epoch",
        db.schema()
    ))
    .fetch_one(db.pool())
    .await
    .unwrap()
}

/// What crash recovery (or a promoted standby, or a physical backup restored) does to
/// fencelock's UNLOGGED tables: empties them.
async fn lose_volatile_state(db: &PgDatabase) {
    common::lose_volatile_state(
        db.pool(),
        db.schema(),
        &[
            "fencelock_epoch_live",
            "fencelock_counters",
            "fencelock_leases",
            "fencelock_lease_readers",
            "fencelock_lease_places",
            "fencelock_advisory_holders",
            "fencelock_advisory_phases",
            "fencelock_advisory_readers",
            "fencelock_advisory_places",
        ],
    )
    .await;
}

/// A rolled-back transaction used its token up: the next grant of the key, through the
/// transaction API or a lock backend, gets a greater one. (Before, the counter bump was part
/// of the caller's transaction and rolled back with it: the next grant got the same token.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transaction_never_gives_its_token_back() {
    let (schema, db) = common::database().await;
    let storage = db.storage();
    let key = key("rolled-back");
    let first = rolled_back(&storage, &key).await;
    let second = committed(&storage, &key).await;
    assert!(second > first, "{second} after the rolled-back {first}");
    let third = rolled_back(&storage, &key).await;
    assert!(third > second, "{third} after {second}");
    let lease = granted(&db.lease_backend(), &key).await;
    assert!(lease > third, "lease {lease} after the rolled-back {third}");
    assert_eq!(storage.peek(&key).await.unwrap(), None, "a write survived");
    schema.cleanup().await;
}

/// The same through PgBouncer in transaction mode (`?pooler=transaction`: every statement one
/// simple-protocol message, the token on a connection of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transaction_never_gives_its_token_back_behind_a_pooler() {
    let bouncer = common::bouncer::bouncer(2).await;
    let (schema, db) = common::bouncer::database(&bouncer, "transaction").await;
    let storage = db.storage();
    let key = key("rolled-back-pooled");
    let mut last = rolled_back(&storage, &key).await;
    for round in 0..4 {
        let next = if round % 2 == 0 {
            committed(&storage, &key).await
        } else {
            rolled_back(&storage, &key).await
        };
        assert!(next > last, "{next} after {last}");
        last = next;
    }
    db.close().await;
    schema.cleanup().await;
}

/// A key whose counter reaches 2^32 - 1 in the live epoch makes the next grant start a new
/// epoch: its token is (epoch + 1) * 2^32 + 1, through every way in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_up_counter_starts_a_new_epoch() {
    let (schema, db) = common::database().await;
    let lease = db.lease_backend();
    let storage = db.storage();
    for (way, name) in ["lease", "advisory", "transaction"].iter().enumerate() {
        let key = key(&format!("used-up/{name}"));
        let start = granted(&lease, &key).await;
        let epoch = epoch_of(start);
        let floor = FencingToken::new((epoch << COUNTER_BITS) | (LAST_COUNTER - 1)).unwrap();
        assert_eq!(lease.advance_token(&key, floor).await.unwrap(), floor);
        let grant = async |key: &LockKey| match way {
            0 => granted(&lease, key).await,
            1 => granted_advisory(&db, key).await,
            _ => committed(&storage, key).await,
        };
        let last = grant(&key).await;
        assert_eq!(last.get(), (epoch << COUNTER_BITS) | LAST_COUNTER, "{name}");
        let next = grant(&key).await;
        assert_eq!(epoch_of(next), epoch + 1, "{name}: {next}");
        assert_eq!(next.get() & LAST_COUNTER, 1, "{name}: {next}");
        assert_eq!(
            live_epoch(&db).await,
            Some(i64::try_from(epoch + 1).unwrap())
        );
        // The advisory lock was taken once: it is free again after the release.
        assert!(
            db.advisory_backend()
                .inspect(&key)
                .await
                .unwrap()
                .unfenced_holder
                .is_none()
        );
    }
    schema.cleanup().await;
}

/// With the UNLOGGED tables emptied (as crash recovery does), every way in starts a new epoch
/// before it hands out a token, and one new epoch serves them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_volatile_state_starts_a_greater_epoch() {
    let (schema, db) = common::database().await;
    let keys: Vec<LockKey> = (0..3).map(|i| key(&format!("lost/{i}"))).collect();
    let mut before = Vec::new();
    for key in &keys {
        before.extend(grant_each_way(&db, key).await);
    }
    let highest = before.iter().max().copied().unwrap();
    for round in 0..2 {
        let epoch = durable_epoch(&db).await;
        lose_volatile_state(&db).await;
        assert_eq!(live_epoch(&db).await, None);
        for (i, key) in keys.iter().enumerate() {
            // Each round starts from a different way in.
            let mut tokens = grant_each_way(&db, key).await;
            tokens.rotate_left((i + round) % 3);
            for token in tokens {
                assert!(
                    token > highest,
                    "round {round}: {token} not above {highest}"
                );
                assert_eq!(epoch_of(token), u64::try_from(epoch + 1).unwrap());
            }
        }
        assert_eq!(
            durable_epoch(&db).await,
            epoch + 1,
            "one new epoch per loss"
        );
    }
    schema.cleanup().await;
}

/// Many clients meeting a lost state at once start one new epoch, not one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_grants_after_a_loss_share_one_new_epoch() {
    let (schema, db) = common::database().await;
    granted(&db.lease_backend(), &key("herd/0")).await;
    let epoch = durable_epoch(&db).await;
    lose_volatile_state(&db).await;
    let mut all = tokio::task::JoinSet::new();
    for i in 0..16 {
        let db = db.clone();
        all.spawn(async move { granted(&db.lease_backend(), &key(&format!("herd/{i}"))).await });
    }
    while let Some(token) = all.join_next().await {
        assert_eq!(epoch_of(token.unwrap()), u64::try_from(epoch + 1).unwrap());
    }
    assert_eq!(durable_epoch(&db).await, epoch + 1);
    schema.cleanup().await;
}

/// The new epoch's commit waits for its WAL flush even where the caller's session (or the
/// database's default) says `synchronous_commit = off`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_epoch_commits_synchronously() {
    let (schema, db) = common::database().await;
    let mut conn = db.pool().acquire().await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    tx.execute("SET LOCAL synchronous_commit = off")
        .await
        .unwrap();
    let epoch: i64 = sqlx::query_scalar(&format!(
        "SELECT \"{}\".fencelock_new_epoch(NULL)",
        db.schema()
    ))
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    let setting: String = sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(setting, "on");
    tx.commit().await.unwrap();
    assert_eq!(live_epoch(&db).await, Some(epoch));
    assert_eq!(durable_epoch(&db).await, epoch);
    // A second call that saw no epoch changes nothing: another caller already made one.
    let again: i64 = sqlx::query_scalar(&format!(
        "SELECT \"{}\".fencelock_new_epoch(NULL)",
        db.schema()
    ))
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(again, epoch);
    drop(conn);
    schema.cleanup().await;
}

/// advance_token to a floor in a later epoch makes that epoch durable: the next grant is above
/// the floor, and still is after the volatile state is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advance_token_beyond_the_live_epoch_is_durable() {
    let (schema, db) = common::database().await;
    let lease = db.lease_backend();
    let key = key("advance-far");
    let start = granted(&lease, &key).await;
    let floor = FencingToken::new(((epoch_of(start) + 5) << COUNTER_BITS) | 3).unwrap();
    assert_eq!(lease.advance_token(&key, floor).await.unwrap(), floor);
    assert_eq!(granted(&lease, &key).await.get(), floor.get() + 1);
    // Another key's next token is in the floor's epoch too (the live epoch now).
    let other = granted(&lease, &self::key("advance-far/other")).await;
    assert_eq!(epoch_of(other), epoch_of(floor));
    lose_volatile_state(&db).await;
    for token in grant_each_way(&db, &key).await {
        assert!(token > floor, "{token} after a loss, floor {floor}");
    }
    // A floor below the live epoch changes nothing but the counter's view of it.
    let low = FencingToken::new(77).unwrap();
    assert!(lease.advance_token(&key, low).await.unwrap() > floor);
    schema.cleanup().await;
}

/// A fresh installation starts at epoch 0: its first tokens are 1, 2, 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_installation_counts_from_one() {
    let (schema, db) = common::database().await;
    let key = key("fresh");
    let tokens: Vec<u64> = grant_each_way(&db, &key)
        .await
        .iter()
        .map(|t| t.get())
        .collect();
    assert_eq!(tokens, [1, 2, 3]);
    assert_eq!(durable_epoch(&db).await, 0);
    schema.cleanup().await;
}

/// Tokens handed out by the logged counters of schema version 3 stay below every token of the
/// epoch design: the migration starts the epoch above them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_from_before_the_epoch_migration_stay_below() {
    let schema = PgSchema::create().await;
    let name = schema.name().to_owned();
    let mut migrator = sqlx::migrate::Migrator::new(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/migrations"
    )))
    .await
    .unwrap();
    let old: Vec<_> = migrator
        .migrations
        .iter()
        .filter(|m| m.version <= 3)
        .cloned()
        .collect();
    migrator.migrations = old.into();
    let mut conn = sqlx::PgConnection::connect_with(&pg_options())
        .await
        .unwrap();
    conn.execute(format!("SET search_path = {name}").as_str())
        .await
        .unwrap();
    migrator.run_direct(&mut conn).await.unwrap();
    let handed_out: i64 = (9 << COUNTER_BITS) + 41;
    conn.execute(
        format!("INSERT INTO fencelock_counters (key, last_token) VALUES ('old', {handed_out}), ('small', 3)")
            .as_str(),
    )
    .await
    .unwrap();
    conn.close().await.unwrap();
    let db = PgDatabase::from_pool(common::app_pool(&name), &name).unwrap();
    db.migrate().await.unwrap();
    assert_eq!(
        durable_epoch(&db).await,
        9,
        "the old tokens' epoch counts as started"
    );
    let handed_out = u64::try_from(handed_out).unwrap();
    for key in [key("old"), key("small"), key("new")] {
        for token in grant_each_way(&db, &key).await {
            assert!(
                token.get() > handed_out,
                "{key}: {token} not above {handed_out}"
            );
            assert_eq!(epoch_of(token), 10, "{key}: {token}");
        }
    }
    db.close().await;
    schema.cleanup().await;
}

/// The last epoch a token floor may be in: `fencelock_epoch` holds epochs up to 2^31 - 1, and
/// the last 2^16 are kept for the new epochs a schema starts by itself.
const MAX_FLOOR_EPOCH: u64 = (1 << 31) - 1 - (1 << 16);

/// A floor that would use up the schema's epochs is refused, saying why, and changes nothing;
/// the greatest floor allowed leaves room: after the volatile state is lost (as by a crash)
/// every way in still grants, above the floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_cannot_use_up_the_schemas_epochs() {
    let (schema, db) = common::database().await;
    let lease = db.lease_backend();
    let key = key("floor-limit");
    let start = granted(&lease, &key).await;
    for epoch in [(1 << 31) - 1, MAX_FLOOR_EPOCH + 1] {
        let floor = FencingToken::new(epoch << COUNTER_BITS | 5).unwrap();
        match lease.advance_token(&key, floor).await {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains(&format!("in epoch {epoch}")), "{message}");
                assert!(message.contains("shared by every key"), "{message}");
            }
            other => panic!("a floor in epoch {epoch} was not refused: {other:?}"),
        }
    }
    let after = granted(&lease, &key).await;
    assert_eq!(
        after.get(),
        start.get() + 1,
        "a refused floor moved the key"
    );
    // The SQL function refuses it too, for operators calling it directly.
    let direct = sqlx::query(&format!(
        "SELECT \"{}\".fencelock_advance_token('floor-limit', $1)",
        db.schema()
    ))
    .bind((((1_u64 << 31) - 1) << COUNTER_BITS) as i64)
    .execute(db.pool())
    .await;
    assert!(
        direct.is_err_and(|e| e.to_string().contains("the last a floor may reach")),
        "the SQL function took a floor in the last epoch"
    );
    // On timeline 1 (the shared server's) the limit is that timeline's: its epochs end at
    // 2^20 - 1, and the last 2^16 are kept.
    let timeline_max = (1 << 20) - 1 - (1 << 16);
    let past = FencingToken::new((timeline_max + 1) << COUNTER_BITS).unwrap();
    match lease.advance_token(&key, past).await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("on timeline 1"), "{message}");
        }
        other => panic!("a floor past timeline 1's epochs was not refused: {other:?}"),
    }
    let highest = FencingToken::new(timeline_max << COUNTER_BITS | LAST_COUNTER).unwrap();
    assert_eq!(lease.advance_token(&key, highest).await.unwrap(), highest);
    lose_volatile_state(&db).await;
    for token in grant_each_way(&db, &key).await {
        assert!(token > highest, "{token} after a loss, floor {highest}");
    }
    schema.cleanup().await;
}

/// A key's counter row is never deleted by mistake (migration 20): a `DELETE` or `TRUNCATE`
/// of the counters, even by the schema's owner, is refused naming the heal, and the key's
/// next grant is still above every token before. (Before, the delete went through and the
/// next grant was token 1 again, below the 3 already granted.) A transaction that says it
/// retires keys nobody will lock again may delete them, as the benchmark's cleanup does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_row_is_never_deleted_by_mistake() {
    let (schema, db) = common::database().await;
    let backend = db.lease_backend();
    let key = key(&format!("kept-{}", db.schema()));
    let mut last = granted(&backend, &key).await;
    for _ in 0..2 {
        last = granted(&backend, &key).await;
    }
    let s = db.schema();
    for statement in [
        format!("DELETE FROM \"{s}\".fencelock_counters WHERE key = '{key}'"),
        format!("TRUNCATE \"{s}\".fencelock_counters"),
    ] {
        let error = sqlx::raw_sql(&statement)
            .execute(schema.admin())
            .await
            .expect_err("a counter row was deleted");
        let text = error.to_string();
        assert!(text.contains("token counters are never deleted"), "{text}");
        assert_eq!(
            error.as_database_error().and_then(|e| e.code()).as_deref(),
            Some("55000"),
            "{text}"
        );
    }
    let next = granted(&backend, &key).await;
    assert!(next > last, "token {next} after {last}");
    sqlx::raw_sql(&format!(
        "BEGIN; SET LOCAL fencelock.forget_counters = on; \
         DELETE FROM \"{s}\".fencelock_counters WHERE key = '{key}'; COMMIT"
    ))
    .execute(schema.admin())
    .await
    .expect("a transaction that retires a key may delete its counter");
}
