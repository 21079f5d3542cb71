//! The moto server of this test binary (`fencelock_servers::moto`), started on first use;
//! it goes away with the test process.

#![allow(dead_code, unused_imports, clippy::panic)]

use std::sync::OnceLock;

use fencelock_core::OwnerId;
pub(crate) use fencelock_servers::moto::{BUCKET, INSTALL, Moto};

/// The moto server of this test binary; a missing install fails the test saying what to do.
pub(crate) fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(|| Moto::try_start().unwrap_or_else(|e| panic!("{e}")))
}

/// An `s3://` URL for a prefix no other test uses.
pub(crate) fn url() -> String {
    moto().url(&format!("t-{}", OwnerId::random()))
}

/// The same, reaching the server through another port of 127.0.0.1 (a fault proxy).
pub(crate) fn url_via(port: u16) -> String {
    moto().url_via(port, &format!("t-{}", OwnerId::random()))
}

/// The value of a connect to moto; a refusal names the version that implements conditional
/// writes, since an older moto ignores `If-Match` and fails the store check.
pub(crate) fn connected<T>(result: fencelock_core::Result<T>) -> T {
    result.unwrap_or_else(|error| {
        panic!("connecting to moto failed: {error}; the tests need moto with conditional writes: `{INSTALL}`")
    })
}
