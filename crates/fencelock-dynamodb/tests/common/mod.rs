//! One moto server per test binary (moto serves DynamoDB on the same endpoint as S3), and
//! configs on it, each under a prefix of its own.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, OnceLock};

use fencelock_conformance::Setup;
use fencelock_core::OwnerId;
use fencelock_dynamodb::servers::SerialProxy;
use fencelock_dynamodb::{DynamoConfig, DynamoTable};
use fencelock_servers::moto::Moto;
use fencelock_servers::proxy::FaultProxy;

/// The table every test uses; each works under a prefix of its own.
pub(crate) const TABLE: &str = "fencelock-tests";

static MOTO: OnceLock<Result<Moto, String>> = OnceLock::new();

/// Where the tests reach moto: the port of a [`SerialProxy`] in front of the moto
/// server of this test binary (started on first use, off the async threads: it waits for the
/// server). The proxy lives in the calling test's runtime, so each test has its own. A
/// missing `moto_server` fails the test saying what to install.
pub(crate) async fn moto() -> Endpoint {
    if MOTO.get().is_none() {
        let started = tokio::task::spawn_blocking(|| Moto::try_start().map_err(|e| e.to_string()))
            .await
            .expect("starting moto panicked");
        let _ = MOTO.set(started);
    }
    let moto = match MOTO.get().expect("set above") {
        Ok(moto) => moto,
        Err(message) => panic!("no moto server for the DynamoDB tests: {message}"),
    };
    let proxy = SerialProxy::start(([127, 0, 0, 1], moto.port).into())
        .await
        .expect("start the serializing proxy");
    Endpoint {
        port: proxy.detach(),
    }
}

/// moto as the tests reach it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Endpoint {
    pub(crate) port: u16,
}

/// The URL of `table` on the server at `port` (moto itself or a proxy in front of it), with
/// moto's accepted credentials.
pub(crate) fn url_at(port: u16, table: &str, options: &str) -> String {
    format!(
        "dynamodb://test:test@{table}?region=us-east-1&endpoint=http://127.0.0.1:{port}{options}"
    )
}

/// A config of the test table under a fresh prefix, creating the table if needed.
pub(crate) async fn config() -> DynamoConfig {
    let moto = moto().await;
    DynamoConfig::from_url(&url_at(moto.port, TABLE, "&create=true"))
        .unwrap()
        .prefix(format!("test-{}/", OwnerId::random()))
}

/// The test table under a fresh prefix.
pub(crate) async fn connect() -> DynamoTable {
    config().await.connect().await.expect("connect to moto")
}

/// A conformance setup under a fresh prefix, reached through a fault proxy: the outage
/// resets every connection and refuses new ones.
pub(crate) async fn setup() -> Setup {
    let moto = moto().await;
    let proxy = Arc::new(
        FaultProxy::start(([127, 0, 0, 1], moto.port).into())
            .await
            .expect("start the fault proxy"),
    );
    let prefix = format!("test-{}/", OwnerId::random());
    let config = DynamoConfig::from_url(&url_at(proxy.port(), TABLE, "&create=true"))
        .unwrap()
        .prefix(prefix);
    let table = config.connect().await.expect("connect to moto");
    let victim = proxy.clone();
    Setup::new(
        Arc::new(table.backend()),
        Arc::new(table.storage()),
        Box::new(move || {
            victim.set_reset(true);
            Box::pin(async {})
        }),
    )
    // Reopened as a new process would: a new client to the same table and prefix.
    .with_reopen(Box::new(move || {
        let config = config.clone();
        Box::pin(async move {
            let table = config.connect().await.expect("reconnect to moto");
            Arc::new(table.backend()) as Arc<dyn fencelock_core::LockBackend>
        })
    }))
    .keep(proxy)
}
