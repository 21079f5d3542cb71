//! The whole conformance suite on the `GET_LOCK` backend and the storage table, on the real
//! server (`FENCELOCK_MYSQL_URL`, default `mysql://root@127.0.0.1:3306/test`), each property
//! under a table prefix of its own.

#![allow(clippy::expect_used)]

mod common;

use fencelock_conformance::Setup;

async fn setup() -> Setup {
    let (db, cleanup) = common::database("c").await;
    let reopen = cleanup.config().clone();
    common::conformance_setup(&db, reopen, cleanup)
}

mod get_lock {
    fencelock_conformance::conformance_suite!(super::setup());
}
