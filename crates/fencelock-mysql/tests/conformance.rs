//! The whole conformance suite on the `GET_LOCK` backend and the storage table, on the real
//! server (`FENCELOCK_MYSQL_URL`, default `mysql://root@127.0.0.1:3306/test`), each property
//! under a table prefix of its own.

#![allow(clippy::expect_used)]

mod common;

use std::sync::Arc;

use fencelock_conformance::Setup;

async fn setup() -> Setup {
    let (db, cleanup) = common::database("c").await;
    let backend = db.lock_backend();
    let storage = db.storage();
    let (target, pools) = (backend.clone(), db.clone());
    let reopen_config = cleanup.config().clone();
    Setup::new(
        Arc::new(backend),
        Arc::new(storage),
        // The outage: an operator KILLs every session holding a lock, and the pools close.
        Box::new(move || {
            let (target, pools) = (target.clone(), pools.clone());
            Box::pin(async move {
                common::kill(&target.session_ids()).await;
                pools.close().await;
            })
        }),
    )
    // Reopened as a new process would: a database of its own on the same tables.
    .with_reopen(Box::new(move || {
        let config = reopen_config.clone();
        Box::pin(async move {
            let db = config.connect().await.expect("reopening the test's tables");
            let backend: Arc<dyn fencelock_core::LockBackend> = Arc::new(db.lock_backend());
            backend
        })
    }))
    .keep(cleanup)
}

mod get_lock {
    fencelock_conformance::conformance_suite!(super::setup());
}
