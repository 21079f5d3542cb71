//! What goes into the scripts and what comes back: ttls in milliseconds, lock values, tokens.
//! Shared by the one-node backend and Redlock.

use std::time::Duration;

use fencelock_core::{Fence, FencingToken, OwnerId, Result};

use crate::error::protocol;

/// The longest ttl accepted: 30 days.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// `ttl` in whole milliseconds, rounded up, so the server never expires a lock before the
/// local deadline computed from the same ttl.
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// The value a lock key holds: `<owner>:<token>`.
pub(crate) fn lock_value(owner: OwnerId, token: FencingToken) -> String {
    format!("{owner}:{token}")
}

/// `"<owner>:"`: what the Redlock scripts recognise a grant by on each node, whose token part
/// may differ between nodes.
pub(crate) fn owner_prefix(owner: OwnerId) -> String {
    format!("{owner}:")
}

/// A token as a script returns it, a decimal string.
pub(crate) fn parse_token(backend: &'static str, value: &str) -> Result<FencingToken> {
    let number = value
        .parse::<i64>()
        .map_err(|_| protocol(backend, format!("token {value:?} is not an integer")))?;
    FencingToken::from_backend(backend, number)
}

/// What marks a lock value as a read phase's: `<owner>:<token>:read` (see
/// `scripts/read_phase.lua`), so the exclusive scripts never take a phase for their grant.
pub(crate) const READ_PHASE_SUFFIX: &str = ":read";

/// A lock key's value, as [`lock_value`] wrote it, or a read phase's (its fence then).
pub(crate) fn parse_lock_value(backend: &'static str, value: &str) -> Result<Fence> {
    let fence = value.strip_suffix(READ_PHASE_SUFFIX).unwrap_or(value);
    let parsed = fence.split_once(':').and_then(|(owner, token)| {
        let owner = owner.parse::<OwnerId>().ok()?;
        let token = parse_token(backend, token).ok()?;
        Some(Fence::new(token, owner))
    });
    parsed.ok_or_else(|| {
        protocol(
            backend,
            format!("lock value {value:?} was not written by fencelock"),
        )
    })
}

/// A fence as the scripts store it: a decimal token and 32 hex digits of owner.
pub(crate) fn parse_fence(
    backend: &'static str,
    token: Option<&[u8]>,
    owner: Option<&[u8]>,
) -> Result<Fence> {
    let token = token
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.parse::<u64>().ok())
        .and_then(FencingToken::new)
        .ok_or_else(|| protocol(backend, "stored fence has no valid token"))?;
    let owner = owner
        .and_then(|o| std::str::from_utf8(o).ok())
        .and_then(|o| o.parse::<OwnerId>().ok())
        .ok_or_else(|| protocol(backend, "stored fence has no valid owner"))?;
    Ok(Fence::new(token, owner))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use fencelock_core::Error;

    use super::*;
    use crate::error::REDIS;

    #[test]
    fn ttl_rounds_up_to_whole_milliseconds() {
        assert_eq!(ttl_millis(Duration::from_millis(1)), 1);
        assert_eq!(ttl_millis(Duration::from_micros(1500)), 2);
        assert_eq!(ttl_millis(MAX_TTL), 30 * 24 * 3600 * 1000);
    }

    #[test]
    fn lock_values_round_trip() {
        let fence = Fence::new(FencingToken::new(42).unwrap(), OwnerId::random());
        let value = lock_value(fence.owner, fence.token);
        assert_eq!(parse_lock_value(REDIS, &value).unwrap(), fence);
        assert!(value.starts_with(&owner_prefix(fence.owner)));
        let phase = format!("{value}{READ_PHASE_SUFFIX}");
        assert_eq!(parse_lock_value(REDIS, &phase).unwrap(), fence);
        for bad in [
            "",
            "x",
            "abc:1",
            &format!("{}:0", fence.owner),
            &format!("{}:-3", fence.owner),
            &format!("{}:3:write", fence.owner),
            &format!("{}:read", fence.owner),
        ] {
            assert!(
                matches!(parse_lock_value(REDIS, bad), Err(Error::Backend { .. })),
                "{bad:?}"
            );
        }
    }
}
