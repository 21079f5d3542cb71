//! The queue tables of the fair backends (DESIGN 5.3, *Fair hand-off*), as the tests of each
//! backend's queue read them.

use std::time::Duration;

use fencelock_core::LockKey;
use fencelock_postgres::PgDatabase;
use tokio::time::{Instant, sleep};

/// The lease backend's queue table.
pub const LEASE: &str = "fencelock_lease_places";
/// The advisory backend's queue table.
pub const ADVISORY: &str = "fencelock_advisory_places";
/// How long anything the tests wait for may take on a loaded machine before they fail.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A key of its own for a test on `db`'s schema.
pub fn key(name: &str, db: &PgDatabase) -> LockKey {
    LockKey::new(format!("{name}/{}", db.schema())).unwrap()
}

/// Live places of `key` in queue table `table`.
pub async fn places(db: &PgDatabase, table: &str, key: &LockKey) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM \"{}\".{table} \
          WHERE key = $1 AND lapses_at > clock_timestamp() AND NOT gone",
        db.schema()
    );
    sqlx::query_scalar(&sql)
        .bind(key.as_str())
        .fetch_one(db.pool())
        .await
        .expect("reading the queue table")
}

/// Waits until `key` has `count` live places in queue table `table`.
pub async fn until_places(db: &PgDatabase, table: &str, key: &LockKey, count: i64) {
    let deadline = Instant::now() + PATIENCE;
    while places(db, table, key).await != count {
        assert!(
            Instant::now() < deadline,
            "the queue of {key} never reached {count} places"
        );
        sleep(Duration::from_millis(10)).await;
    }
}
