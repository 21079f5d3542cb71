//! A run leaves nothing of its own behind: short suites against the shared Redis
//! (`FENCELOCK_REDIS_URL`, default `redis://127.0.0.1:6379`), PostgreSQL
//! (`FENCELOCK_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`) and, with the
//! `mysql` feature, MySQL/MariaDB (`FENCELOCK_MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`), and on a Redis Cluster the test spawns, checked before
//! `Suite::close` (the run's keys and rows are there) and after (none is left).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock_bench::{Settings, Suite, run_all};
use fencelock_postgres::{PgBackendKind, PgConfig};
use fencelock_redis::{RedisConfig, RedlockConfig};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Executor, Row};

const SHORT: Settings = Settings {
    duration: Duration::from_millis(20),
    concurrency: 2,
    keys: 4,
};

fn redis_url() -> String {
    std::env::var("FENCELOCK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn pg_url() -> String {
    std::env::var("FENCELOCK_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn no_redis(e: impl std::fmt::Display) -> String {
    format!(
        "cannot use Redis at {}: {e}\nStart it (`redis-server --port 6379`, or \
         scripts/test-deps), or set FENCELOCK_REDIS_URL.",
        redis_url()
    )
}

fn no_postgres(e: impl std::fmt::Display) -> String {
    format!(
        "cannot use PostgreSQL at {}: {e}\nStart it (scripts/test-deps), or set \
         FENCELOCK_PG_URL to a server where the user may create schemas.",
        pg_url()
    )
}

async fn run(suite: &Suite) {
    run_all(suite, SHORT, &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("the run failed: {e}"));
}

/// Every key on the server at `url` that names a key of the run (fencelock's keys embed it in
/// their hash tag, the raw baseline's are the run's keys themselves).
async fn keys_of_run(url: &str, suite: &Suite) -> Vec<String> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{}", no_redis(e)));
    let pattern = format!("*{}*", suite.key_prefix());
    let mut found = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, names): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .unwrap();
        found.extend(names);
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}

#[tokio::test]
async fn a_redis_run_leaves_no_key() {
    let config = RedisConfig::from_url(&redis_url()).unwrap();
    let suite = Suite::connect(&config)
        .await
        .unwrap_or_else(|e| panic!("{}", no_redis(e)));
    run(&suite).await;
    let before = keys_of_run(&redis_url(), &suite).await;
    for (what, suffix) in [("token counter", ":token"), ("stored data", ":data")] {
        assert!(
            before.iter().any(|k| k.ends_with(suffix)),
            "no {what} of the run before close: {before:?}"
        );
    }
    let plain = suite.key(0, "write").unwrap();
    assert!(
        before.iter().any(|k| k == plain.as_str()),
        "no plain write of the run before close: {before:?}"
    );

    suite.close().await.unwrap();
    let after = keys_of_run(&redis_url(), &suite).await;
    assert!(after.is_empty(), "left behind: {after:?}");
}

#[tokio::test]
async fn a_redlock_run_leaves_no_key_on_its_nodes_or_its_storage() {
    // One node in database 0, the fenced data in database 9 of the same server: two key
    // spaces, both to be cleaned.
    let node = RedisConfig::from_url(&redis_url()).unwrap();
    let storage_url = format!("{}/9", redis_url().trim_end_matches('/'));
    let storage = RedisConfig::from_url(&storage_url).unwrap();
    let config = RedlockConfig::new([node.to_url()]).with_storage(storage);
    let suite = Suite::connect(&config)
        .await
        .unwrap_or_else(|e| panic!("{}", no_redis(e)));
    run(&suite).await;
    let on_node = keys_of_run(&redis_url(), &suite).await;
    let on_storage = keys_of_run(&storage_url, &suite).await;
    assert!(
        on_node.iter().any(|k| k.ends_with(":token")),
        "no token counter of the run on the node: {on_node:?}"
    );
    assert!(
        on_storage.iter().any(|k| k.ends_with(":data")),
        "no stored data of the run on the storage server: {on_storage:?}"
    );

    suite.close().await.unwrap();
    let left: Vec<String> = keys_of_run(&redis_url(), &suite)
        .await
        .into_iter()
        .chain(keys_of_run(&storage_url, &suite).await)
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test]
async fn a_redis_cluster_run_leaves_no_key_on_any_master() {
    use fencelock_redis::RedisClusterConfig;
    use fencelock_redis::servers::RedisCluster;

    // Three masters, no replica: every node is a master, and each gets keys of the run.
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::spawn(3, 0))
        .await
        .unwrap();
    let config = RedisClusterConfig::from_url(&cluster.url()).unwrap();
    let suite = Suite::connect(&config)
        .await
        .unwrap_or_else(|e| panic!("cannot use the spawned cluster {}: {e}", cluster.url()));
    run(&suite).await;
    let mut before = Vec::new();
    for port in cluster.ports() {
        let on_node = keys_of_run(&format!("redis://127.0.0.1:{port}"), &suite).await;
        assert!(
            on_node.iter().any(|k| k.ends_with(":token")),
            "no token counter of the run on the master at {port}: {on_node:?}"
        );
        before.extend(on_node);
    }
    assert!(
        before.iter().any(|k| k.ends_with(":data")),
        "no stored data of the run before close: {before:?}"
    );
    let plain = suite.key(0, "write").unwrap();
    assert!(
        before.iter().any(|k| k == plain.as_str()),
        "no plain write of the run before close: {before:?}"
    );

    suite.close().await.unwrap();
    for port in cluster.ports() {
        let left = keys_of_run(&format!("redis://127.0.0.1:{port}"), &suite).await;
        assert!(left.is_empty(), "left behind on {port}: {left:?}");
    }
}

/// A fresh schema on the test server, dropped by `drop_schema`.
async fn create_schema() -> (PgPool, String) {
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&pg_url())
        .await
        .unwrap_or_else(|e| panic!("{}", no_postgres(e)));
    let name = format!(
        "fl_bench_cleanup_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    admin
        .execute(format!("CREATE SCHEMA {name}").as_str())
        .await
        .unwrap_or_else(|e| panic!("{}", no_postgres(e)));
    (admin, name)
}

/// Rows of every table in `schema` whose text mentions the run's key prefix, by table.
async fn rows_of_run(admin: &PgPool, schema: &str, suite: &Suite) -> Vec<(String, i64)> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(admin)
    .await
    .unwrap();
    assert!(!tables.is_empty(), "no table in {schema}");
    let mut found = Vec::new();
    for table in tables {
        let row = sqlx::query(&format!(
            "SELECT count(*) FROM \"{schema}\".\"{table}\" t WHERE strpos(t::text, $1) > 0"
        ))
        .bind(suite.key_prefix())
        .fetch_one(admin)
        .await
        .unwrap();
        let count: i64 = row.get(0);
        if count > 0 {
            found.push((table, count));
        }
    }
    found
}

/// Drops the schema when the test ends, passed or failed: on a thread and runtime of its own,
/// since the test's runtime may be unwinding.
struct DropSchema(String);

impl Drop for DropSchema {
    fn drop(&mut self) {
        let schema = self.0.clone();
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&pg_url())
                    .await?;
                pool.execute(format!("DROP SCHEMA IF EXISTS {schema} CASCADE").as_str())
                    .await?;
                pool.close().await;
                Ok::<_, sqlx::Error>(())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
            panic!("could not drop the test schema {}", self.0);
        }
    }
}

#[tokio::test]
async fn a_postgres_run_leaves_no_row_and_no_table() {
    // A schema serves one lock mechanism: one schema per backend.
    for kind in [PgBackendKind::Lease, PgBackendKind::Advisory] {
        let (admin, schema) = create_schema().await;
        let _drop = DropSchema(schema.clone());
        check_postgres(admin, schema, kind).await;
    }
}

async fn check_postgres(admin: PgPool, schema: String, kind: PgBackendKind) {
    {
        let config = PgConfig::from_url(&pg_url())
            .unwrap()
            .schema(schema.as_str())
            .with_backend_kind(kind);
        let suite = Suite::connect(&config)
            .await
            .unwrap_or_else(|e| panic!("{}", no_postgres(e)));
        run(&suite).await;
        let before = rows_of_run(&admin, &schema, &suite).await;
        for table in ["fencelock_counters", "fencelock_storage"] {
            assert!(
                before.iter().any(|(t, _)| t == table),
                "{kind:?}: no row of the run in {table} before close: {before:?}"
            );
        }
        assert!(
            before
                .iter()
                .any(|(t, _)| t.starts_with("fencelock_bench_plain_")),
            "{kind:?}: no plain write of the run before close: {before:?}"
        );

        suite.close().await.unwrap();
        let after = rows_of_run(&admin, &schema, &suite).await;
        assert!(after.is_empty(), "{kind:?}: left behind: {after:?}");
        let plain: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM information_schema.tables \
             WHERE table_schema = $1 AND table_name LIKE 'fencelock\\_bench\\_plain\\_%'",
        )
        .bind(&schema)
        .fetch_one(&admin)
        .await
        .unwrap();
        assert_eq!(plain, 0, "{kind:?}: the plain table is left");
    }
}

/// A run stopped while its waiters queue on one key (as `fencelock bench` stops at SIGINT:
/// the run's future is dropped, then the suite closed) leaves none of their places: the
/// close waits for the leaves the dropped requests sent before it removes the run's rows.
/// Before, leaves that landed after the cleanup left places behind.
#[tokio::test]
async fn a_postgres_run_stopped_while_waiters_queue_leaves_no_place() {
    let (admin, schema) = create_schema().await;
    let _drop = DropSchema(schema.clone());
    let config = PgConfig::from_url(&pg_url())
        .unwrap()
        .schema(schema.as_str());
    let suite = Suite::connect(&config)
        .await
        .unwrap_or_else(|e| panic!("{}", no_postgres(e)));
    let contended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = contended.clone();
    let mut progress = move |line: &str| {
        if line.contains("contended") {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    };
    let settings = Settings {
        duration: Duration::from_secs(2),
        concurrency: 64,
        keys: 4,
    };
    tokio::select! {
        outcome = run_all(&suite, settings, &mut progress) => {
            panic!("the run ended before it was stopped: {:?}", outcome.map(drop));
        }
        () = async {
            while !contended.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // Into the fenced subject's turn at the hot key: its waiters hold places.
            tokio::time::sleep(Duration::from_millis(2_500)).await;
        } => {}
    }
    suite.close().await.unwrap();
    let after = rows_of_run(&admin, &schema, &suite).await;
    assert!(after.is_empty(), "left behind: {after:?}");
}

/// MySQL/MariaDB at `FENCELOCK_MYSQL_URL` (default `mysql://root@127.0.0.1:3306/test`), under
/// a table prefix of the test's own, uninstalled when the test ends.
mod mysql {
    use super::*;

    use fencelock_mysql::MySqlConfig;
    use sqlx::mysql::MySqlPool;

    fn mysql_url() -> String {
        std::env::var("FENCELOCK_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
    }

    fn no_mysql(e: impl std::fmt::Display) -> String {
        format!(
            "cannot use MySQL/MariaDB at {}: {e}\nStart a server (for example `service mariadb \
             start`; user root with an empty password and a database `test`), or set \
             FENCELOCK_MYSQL_URL=mysql://user:password@host:port/database.",
            mysql_url()
        )
    }

    /// Drops the prefix's tables and procedures (token counters included) when the test
    /// ends, passed or failed: on a thread and runtime of its own.
    struct Uninstall(MySqlConfig);

    impl Drop for Uninstall {
        fn drop(&mut self) {
            let config = self.0.clone().install(false);
            let dropped = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let db = config.connect().await?;
                    let dropped = db.uninstall().await;
                    db.close().await;
                    dropped
                })
            })
            .join();
            if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
                panic!(
                    "could not uninstall the test prefix {}",
                    self.0.prefix_name()
                );
            }
        }
    }

    /// Rows of the prefix's tables whose key or resource starts with the run's key prefix,
    /// by table, and the rows of plain tables of the baseline, by table.
    async fn rows_of_run(pool: &MySqlPool, prefix: &str, suite: &Suite) -> Vec<(String, i64)> {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name LIKE CONCAT(?, '%') ORDER BY 1",
        )
        .bind(prefix.replace('_', "\\_"))
        .fetch_all(pool)
        .await
        .unwrap();
        assert!(!tables.is_empty(), "no table under {prefix}");
        let mut found = Vec::new();
        for table in tables {
            let columns: Vec<String> = sqlx::query_scalar(
                "SELECT CAST(column_name AS CHAR) FROM information_schema.columns \
                 WHERE table_schema = DATABASE() AND table_name = ? \
                 AND column_name IN ('lock_key', 'resource')",
            )
            .bind(&table)
            .fetch_all(pool)
            .await
            .unwrap();
            let Some(column) = columns.first() else {
                continue;
            };
            let count: i64 = sqlx::query_scalar(&format!(
                "SELECT COUNT(*) FROM {table} WHERE LOCATE(?, {column}) > 0"
            ))
            .bind(suite.key_prefix().as_bytes())
            .fetch_one(pool)
            .await
            .unwrap();
            if count > 0 {
                found.push((table, count));
            }
        }
        found
    }

    #[tokio::test]
    async fn a_mysql_run_leaves_no_row_and_no_table() {
        let prefix = format!("bc{:08x}_", rand::random::<u32>());
        let config = MySqlConfig::from_url(&mysql_url())
            .unwrap_or_else(|e| panic!("{}", no_mysql(e)))
            .prefix(prefix.as_str());
        let suite = Suite::connect(&config)
            .await
            .unwrap_or_else(|e| panic!("{}", no_mysql(e)));
        let _uninstall = Uninstall(config.clone());
        let admin = MySqlPool::connect_with(config.connect_options().unwrap())
            .await
            .unwrap_or_else(|e| panic!("{}", no_mysql(e)));
        run(&suite).await;
        let before = rows_of_run(&admin, &prefix, &suite).await;
        for table in ["counters", "storage"] {
            assert!(
                before.iter().any(|(t, _)| *t == format!("{prefix}{table}")),
                "no row of the run in {prefix}{table} before close: {before:?}"
            );
        }
        assert!(
            before
                .iter()
                .any(|(t, _)| t.starts_with(&format!("{prefix}bench_plain_"))),
            "no plain write of the run before close: {before:?}"
        );

        suite.close().await.unwrap();
        let after = rows_of_run(&admin, &prefix, &suite).await;
        assert!(after.is_empty(), "left behind: {after:?}");
        let plain: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name LIKE CONCAT(?, 'bench\\_plain\\_%')",
        )
        .bind(prefix.replace('_', "\\_"))
        .fetch_one(&admin)
        .await
        .unwrap();
        assert_eq!(plain, 0, "the plain table is left");
        admin.close().await;
    }
}
