//! The conformance suite on a real `redis-server`, one fresh server per property.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_conformance::Setup;
use fencelock_redis::RedisConfig;
use fencelock_redis::servers::RedisServer;

async fn setup() -> Setup {
    let server = Arc::new(RedisServer::spawn());
    let backend = RedisConfig::new(server.url())
        .call_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect to the spawned redis-server");
    let storage = backend.storage();
    let killed = Arc::clone(&server);
    Setup::new(
        Arc::new(backend),
        Arc::new(storage),
        Box::new(move || {
            let server = Arc::clone(&killed);
            Box::pin(async move {
                tokio::task::spawn_blocking(move || server.kill())
                    .await
                    .unwrap()
            })
        }),
    )
    .keep(server)
}

fencelock_conformance::conformance_suite!(setup());
