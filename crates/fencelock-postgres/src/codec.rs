//! How fences, ttls and tokens travel to and from SQL.

use std::time::Duration;

use fencelock_core::{Error, Fence, FencingToken, OwnerId, Result};

use crate::error::protocol;

/// An owner as stored: 16 bytes, big-endian.
pub(crate) fn owner_bytes(owner: OwnerId) -> [u8; 16] {
    owner.as_u128().to_be_bytes()
}

/// An owner read back from a `bytea` column.
pub(crate) fn owner_from(backend: &'static str, bytes: &[u8]) -> Result<OwnerId> {
    let array: [u8; 16] = bytes.try_into().map_err(|_| {
        protocol(
            backend,
            format!("owner of {} bytes, expected 16", bytes.len()),
        )
    })?;
    Ok(OwnerId::from_u128(u128::from_be_bytes(array)))
}

/// A token as stored in a `bigint` column. Tokens past `i64::MAX` cannot be stored.
pub(crate) fn token_param(backend: &'static str, token: FencingToken) -> Result<i64> {
    i64::try_from(token.get()).map_err(|_| Error::Backend {
        backend,
        message: format!("token {token} does not fit Postgres' bigint"),
        source: None,
    })
}

/// A fence read back from its columns.
pub(crate) fn fence_from(backend: &'static str, token: i64, owner: &[u8]) -> Result<Fence> {
    Ok(Fence::new(
        FencingToken::from_backend(backend, token)?,
        owner_from(backend, owner)?,
    ))
}

/// A ttl in whole microseconds, rounded up, for `interval` arithmetic.
pub(crate) fn micros(ttl: Duration) -> f64 {
    ttl.as_nanos().div_ceil(1000) as f64
}

/// A ttl in whole milliseconds, rounded up, for `idle_session_timeout`.
pub(crate) fn millis_setting(ttl: Duration) -> String {
    ttl.as_nanos().div_ceil(1_000_000).to_string()
}

/// A remaining time reported in microseconds.
pub(crate) fn remaining(micros: Option<i64>) -> Option<Duration> {
    micros.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)))
}
