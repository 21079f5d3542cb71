//! Migrations run by several processes at once on a fresh schema: every one succeeds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fencelock_postgres::PgConfig;
use fencelock_testkit::postgres::{PgSchema, pg_options};

/// Eight clients migrate the same new schema at the same moment, as eight `fencelock run`s
/// started together do. Without a lock held until the migration commits, the later ones
/// re-create the first one's uncommitted tables and fail on duplicate type names (23505).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrations_of_a_fresh_schema_all_succeed() {
    for _round in 0..3 {
        let schema = PgSchema::create().await;
        let name = schema.name().to_owned();
        let mut clients = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let config = PgConfig::from_options(pg_options()).schema(name.as_str());
            clients.spawn(async move { config.connect().await.map(|_| ()) });
        }
        while let Some(outcome) = clients.join_next().await {
            outcome
                .unwrap()
                .unwrap_or_else(|e| panic!("a concurrent migration of {name} failed: {e}"));
        }
        schema.cleanup().await;
    }
}
