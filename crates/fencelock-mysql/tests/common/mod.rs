//! What the tests share: the server's URL, a database with a table prefix of its own that is
//! dropped afterwards, and an administrator's connection for plain SQL.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub(crate) mod accounts;
pub(crate) mod server;

use std::time::Duration;

use fencelock_core::OwnerId;
use fencelock_mysql::sqlx::mysql::MySqlConnection;
use fencelock_mysql::sqlx::{self, Connection};
use fencelock_mysql::{MySqlConfig, MySqlDatabase};

/// The server every test uses unless `FENCELOCK_MYSQL_URL` names another.
pub(crate) const DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306/test";

pub(crate) fn url() -> String {
    std::env::var("FENCELOCK_MYSQL_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// The config of the test server with a table prefix no other test uses.
pub(crate) fn config(tag: &str) -> MySqlConfig {
    let prefix = format!("t{:08x}_{tag}_", rand_u32());
    MySqlConfig::from_url(&url())
        .unwrap_or_else(|e| panic!("FENCELOCK_MYSQL_URL is not a usable MySQL URL: {e}"))
        .prefix(&prefix[..prefix.len().min(fencelock_mysql::MAX_PREFIX_LEN)])
}

fn rand_u32() -> u32 {
    // OwnerId draws from the CSPRNG; its low bits are as good as any.
    OwnerId::random().as_u128() as u32
}

fn unreachable(config: &MySqlConfig, error: impl std::fmt::Display) -> ! {
    panic!(
        "cannot use MySQL/MariaDB at {config}: {error}\n\
         Start a server (for example `service mariadb start`; user root with an empty password \
         and a database `test`), or set FENCELOCK_MYSQL_URL=mysql://user:password@host:port/database"
    )
}

/// A database with fencelock installed under a fresh prefix, and the guard that drops it.
pub(crate) async fn database(tag: &str) -> (MySqlDatabase, Cleanup) {
    let config = config(tag);
    let db = config
        .connect()
        .await
        .unwrap_or_else(|e| unreachable(&config, e));
    (db, Cleanup::new(config))
}

/// A fault proxy in front of `config`'s server, and fencelock on `config`'s prefix connected
/// through it.
pub(crate) async fn through_proxy(
    config: &MySqlConfig,
) -> (fencelock_testkit::proxy::FaultProxy, MySqlDatabase) {
    let server = config.hosts()[0].clone();
    let target = tokio::net::lookup_host(server.to_string())
        .await
        .unwrap()
        .next()
        .unwrap();
    let proxy = fencelock_testkit::proxy::FaultProxy::start(target)
        .await
        .unwrap();
    let proxied = config
        .clone()
        .with_hosts(&[fencelock_core::HostPort::new("127.0.0.1", proxy.port())])
        .unwrap()
        .connect()
        .await
        .unwrap();
    (proxy, proxied)
}

/// Drops the tables and procedures of a test's prefix, and the test's own tables, when the
/// test ends, however it ends.
#[derive(Debug)]
pub(crate) struct Cleanup {
    config: MySqlConfig,
    tables: Vec<String>,
}

impl Cleanup {
    pub(crate) fn new(config: MySqlConfig) -> Self {
        Cleanup {
            config,
            tables: Vec::new(),
        }
    }

    /// The config of the test's prefix.
    #[allow(dead_code)]
    pub(crate) fn config(&self) -> &MySqlConfig {
        &self.config
    }

    /// A table of the test's own (named after the prefix) to drop as well.
    pub(crate) fn table(&mut self, name: &str) -> String {
        let table = format!("{}{name}", self.config.prefix_name());
        self.tables.push(table.clone());
        table
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let config = self
            .config
            .clone()
            .install(false)
            .pool_size(1)
            .session_pool_size(1);
        let tables = std::mem::take(&mut self.tables);
        on_own_runtime(async move {
            let db = config.connect().await.ok()?;
            for table in tables {
                let drop = format!("DROP TABLE IF EXISTS {table}");
                let _ = sqlx::query(&drop).execute(db.pool()).await;
            }
            let outcome = db.uninstall().await.ok();
            db.close().await;
            outcome
        });
    }
}

/// Runs `work` to its end on a runtime of its own, on a thread of its own, from a `Drop`: the
/// test's runtime may be ending. `None` when no runtime could be built.
pub(crate) fn on_own_runtime<T: Send + 'static>(
    work: impl std::future::Future<Output = Option<T>> + Send + 'static,
) -> Option<T> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?
            .block_on(work)
    })
    .join()
    .ok()
    .flatten()
}

/// The conformance setup of `db`, whose installation `reopen` connects to again as a new
/// process would; `keep` lives as long as the test.
pub(crate) fn conformance_setup(
    db: &MySqlDatabase,
    reopen: MySqlConfig,
    keep: impl std::any::Any + Send + Sync,
) -> fencelock_conformance::Setup {
    use std::sync::Arc;
    let backend = db.lock_backend();
    let (target, pools) = (backend.clone(), db.clone());
    fencelock_conformance::Setup::new(
        Arc::new(backend),
        Arc::new(db.storage()),
        // The outage: an operator KILLs every session holding a lock, and the pools close.
        Box::new(move || {
            let (target, pools) = (target.clone(), pools.clone());
            Box::pin(async move {
                kill(&target.session_ids()).await;
                pools.close().await;
            })
        }),
    )
    // Reopened as a new process would: a database of its own on the same tables.
    .with_reopen(Box::new(move || {
        let config = reopen.clone();
        Box::pin(async move {
            let db = config.connect().await.expect("reopening the test's tables");
            let backend: Arc<dyn fencelock_core::LockBackend> = Arc::new(db.lock_backend());
            backend
        })
    }))
    .keep(keep)
}

/// A plain connection to the test server, as any other client would open.
pub(crate) async fn admin() -> MySqlConnection {
    let config = MySqlConfig::from_url(&url()).unwrap();
    MySqlConnection::connect_with(&config.connect_options().unwrap())
        .await
        .unwrap_or_else(|e| unreachable(&config, e))
}

/// Ends the sessions `ids` with `KILL`, as an operator would.
pub(crate) async fn kill(ids: &[u64]) {
    let mut admin = admin().await;
    for id in ids {
        // A session that already ended answers "unknown thread": nothing left to kill.
        let _ = sqlx::query(&format!("KILL CONNECTION {id}"))
            .execute(&mut admin)
            .await;
    }
    admin.close().await.ok();
}

/// `IS_USED_LOCK(name)`: the connection holding the lock, if any.
pub(crate) async fn holder_of(conn: &mut MySqlConnection, name: &str) -> Option<u64> {
    let holder: Option<i64> = sqlx::query_scalar("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
        .bind(name)
        .fetch_one(conn)
        .await
        .unwrap();
    holder.map(|id| u64::try_from(id).unwrap())
}

/// Polls `check` every 20 ms until it is true or `patience` has passed.
pub(crate) async fn eventually<F, Fut>(patience: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A URL component with its `%XX` escapes decoded.
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Polls `IS_USED_LOCK(name)` on `conn` every 20 ms until `want` accepts it or `patience` has
/// passed; whether it did.
pub(crate) async fn holder_becomes(
    conn: &mut MySqlConnection,
    name: &str,
    want: impl Fn(Option<u64>) -> bool,
    patience: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if want(holder_of(conn, name).await) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
