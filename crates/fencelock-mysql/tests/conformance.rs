//! The whole conformance suite on the `GET_LOCK` backend and the storage table, on the real
//! server (`FENCELOCK_MYSQL_URL`, default `mysql://root@127.0.0.1:3306/test`), each property
//! under a table prefix of its own.

mod common;

use std::sync::Arc;

use fencelock_conformance::Setup;

async fn setup() -> Setup {
    let (db, cleanup) = common::database("c").await;
    let backend = db.lock_backend();
    let storage = db.storage();
    let (target, pools) = (backend.clone(), db.clone());
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
    .keep(cleanup)
}

mod get_lock {
    fencelock_conformance::conformance_suite!(super::setup());
}
