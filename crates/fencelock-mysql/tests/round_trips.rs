//! The round trips of an uncontended grant and of a release (DESIGN 4.0, *Round trips*),
//! counted at the TCP level by a proxy between the backend and the server: one `CALL` each,
//! which is all the call waits for, and sqlx's `COM_PING` of the session on its way back into
//! the pool after a release, which it does not wait for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use fencelock_core::{LockBackend, LockKey};
use fencelock_testkit::proxy::uncontended_round_trips;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_grant_and_a_release_are_one_call_each() {
    let (db, cleanup) = common::database("rtrips").await;
    let (proxy, proxied) = common::through_proxy(cleanup.config()).await;
    let backend = proxied.lock_backend();
    let key = LockKey::new("round-trips").unwrap();
    let counted = uncontended_round_trips(&proxy, &backend, &key, 5).await;
    // The grant keeps its session for the lease: the call alone. The release gives it back.
    counted.assert_each(backend.name(), 1, 2);
    proxied.close().await;
    db.close().await;
}
