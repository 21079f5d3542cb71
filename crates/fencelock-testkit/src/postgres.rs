//! Throwaway Postgres schemas on the server named by `FENCELOCK_PG_URL`.
//!
//! ```no_run
//! # async fn demo() {
//! use fencelock_testkit::postgres::PgSchema;
//! let schema = PgSchema::create().await; // fails loudly if no server is reachable
//! let url = schema.url();                // the server's URL
//! let name = schema.name();              // a fresh, unique schema
//! # let _ = (url, name);
//! schema.cleanup().await;                // or just drop it
//! # }
//! ```

use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgPool};

/// The variable naming the test server.
pub const PG_URL_VAR: &str = "FENCELOCK_PG_URL";
/// The server used when [`PG_URL_VAR`] is unset.
pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The test server's URL: `FENCELOCK_PG_URL`, or [`DEFAULT_PG_URL`].
pub fn pg_url() -> String {
    std::env::var(PG_URL_VAR).unwrap_or_else(|_| DEFAULT_PG_URL.to_owned())
}

fn how_to_fix(url: &str, error: &dyn std::fmt::Display) -> String {
    format!(
        "cannot use the Postgres test server at {url}: {error}\n\
         Start it (for example `pg_ctlcluster 15 main start`, with a database `test` that user \
         `postgres` may use: `createdb -U postgres test`), or set {PG_URL_VAR} to a reachable \
         server where the user may create schemas and roles."
    )
}

/// Connect options for the test server.
pub fn pg_options() -> PgConnectOptions {
    let url = pg_url();
    PgConnectOptions::from_str(&url).unwrap_or_else(|e| panic!("{}", how_to_fix(&url, &e)))
}

/// The test server's socket address (for putting a
/// [`FaultProxy`](crate::proxy::FaultProxy) in front of it).
pub fn pg_addr() -> SocketAddr {
    let options = pg_options();
    let host = options.get_host();
    let host = if host.starts_with('/') {
        "127.0.0.1"
    } else {
        host
    };
    (host, options.get_port())
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .unwrap_or_else(|| panic!("{}", how_to_fix(&pg_url(), &"cannot resolve the host")))
}

/// A uniquely named schema, dropped (`CASCADE`) by [`cleanup`](Self::cleanup) or on drop.
#[derive(Debug)]
pub struct PgSchema {
    name: String,
    url: String,
    admin: Option<PgPool>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl PgSchema {
    /// Connects to the test server and creates a fresh schema. Panics with a message saying
    /// what to start or set when the server cannot be used.
    pub async fn create() -> Self {
        let url = pg_url();
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(pg_options())
            .await
            .unwrap_or_else(|e| panic!("{}", how_to_fix(&url, &e)));
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "fl_t_{}_{}_{:x}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            nanos
        );
        admin
            .execute(format!("CREATE SCHEMA {name}").as_str())
            .await
            .unwrap_or_else(|e| panic!("{}", how_to_fix(&url, &e)));
        PgSchema {
            name,
            url,
            admin: Some(admin),
        }
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's URL (the schema is not part of it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A pool on the server with superuser-ish rights of the URL's user, for test set-up
    /// (creating roles, terminating sessions).
    pub fn admin(&self) -> &PgPool {
        // Only `cleanup` and `drop` take the pool, and both consume the schema.
        self.admin
            .as_ref()
            .unwrap_or_else(|| unreachable!("admin pool taken before cleanup"))
    }

    /// A number derived from the schema's name, for tests that need ids no other test uses.
    pub fn unique_id(&self) -> i64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in self.name.bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Positive and far from small hand-picked ids such as 402.
        ((hash >> 2) | (1 << 60)) as i64
    }

    /// Creates a login role of the schema's own, `<schema>_<suffix>`, with no rights yet, and
    /// returns its name. Dropped with the schema (with whatever it still owns or was granted).
    pub async fn role(&self, suffix: &str) -> String {
        let role = format!("{}_{suffix}", self.name);
        self.admin()
            .execute(format!("CREATE ROLE {role} LOGIN").as_str())
            .await
            .unwrap_or_else(|e| panic!("creating test role {role}: {e}"));
        role
    }

    /// Drops the schema now.
    pub async fn cleanup(mut self) {
        if let Some(admin) = self.admin.take() {
            drop_schema(&admin, &self.name).await;
        }
    }
}

async fn drop_schema(admin: &PgPool, name: &str) {
    let sql = format!("SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS {name} CASCADE");
    if let Err(error) = admin.execute(sql.as_str()).await {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("warning: could not drop test schema {name}: {error}");
        }
    }
    // The schema's roles (`PgSchema::role`): their names are the schema's, then `_`.
    let roles: Vec<String> =
        sqlx::query_scalar("SELECT rolname::text FROM pg_roles WHERE starts_with(rolname, $1)")
            .bind(format!("{name}_"))
            .fetch_all(admin)
            .await
            .unwrap_or_default();
    for role in roles {
        let sql = format!("DROP OWNED BY {role}; DROP ROLE {role}");
        if let Err(error) = admin.execute(sql.as_str()).await {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("warning: could not drop test role {role}: {error}");
            }
        }
    }
    admin.close().await;
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let Some(admin) = self.admin.take() else {
            return;
        };
        let name = std::mem::take(&mut self.name);
        // The pool belongs to the runtime that is dropping us; a fresh connection on a
        // private runtime does the drop so this works from any context.
        drop(admin);
        let handle = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(admin) = PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_with(pg_options())
                    .await
                {
                    drop_schema(&admin, &name).await;
                }
            });
        });
        let _ = handle.join();
    }
}
