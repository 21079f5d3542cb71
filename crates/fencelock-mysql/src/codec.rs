//! How fencelock's values travel as SQL parameters and columns.

use std::time::Duration;

use fencelock_core::{Fence, FencingToken, OwnerId, Result};

use crate::error::protocol;

/// An owner as `BINARY(16)`, big-endian.
pub(crate) fn owner_bytes(owner: OwnerId) -> [u8; 16] {
    owner.as_u128().to_be_bytes()
}

/// An owner read back from a `BINARY(16)` column.
pub(crate) fn owner_from(bytes: &[u8]) -> Result<OwnerId> {
    let bytes: [u8; 16] = bytes
        .try_into()
        .map_err(|_| protocol(format!("owner of {} bytes, expected 16", bytes.len())))?;
    Ok(OwnerId::from_u128(u128::from_be_bytes(bytes)))
}

/// A token as a SQL `BIGINT`; tokens above `i64::MAX` are refused (`InvalidConfig`).
pub(crate) fn token_param(token: FencingToken) -> Result<i64> {
    i64::try_from(token)
}

/// A token read back from a `BIGINT` column.
pub(crate) fn token_from(value: i64) -> Result<FencingToken> {
    FencingToken::from_backend(crate::error::BACKEND, value)
}

/// A fence read back from its two columns.
pub(crate) fn fence_from(token: i64, owner: &[u8]) -> Result<Fence> {
    Ok(Fence::new(token_from(token)?, owner_from(owner)?))
}

/// A ttl in whole microseconds (ttls are bounded by `max_ttl`, far below `i64::MAX` us).
pub(crate) fn micros(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX)
}

/// The session's `wait_timeout` for a lease of `ttl`: whole seconds, rounded up, at least 1.
/// The server ends a session idle that long, so a silent holder's session ends no earlier than
/// its lease.
pub(crate) fn idle_seconds(ttl: Duration) -> i32 {
    let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i32::try_from(seconds.max(1)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn idle_seconds_round_up() {
        assert_eq!(idle_seconds(Duration::from_millis(10)), 1);
        assert_eq!(idle_seconds(Duration::from_secs(1)), 1);
        assert_eq!(idle_seconds(Duration::from_millis(1001)), 2);
        assert_eq!(idle_seconds(Duration::from_secs(30)), 30);
    }

    #[test]
    fn owners_round_trip() {
        let owner = OwnerId::random();
        assert_eq!(owner_from(&owner_bytes(owner)).unwrap(), owner);
        assert!(owner_from(&[1, 2, 3]).is_err());
    }
}
