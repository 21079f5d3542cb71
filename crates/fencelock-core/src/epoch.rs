//! Tokens as `epoch << 32 | counter`, for backends that keep a durable epoch over volatile
//! per-key counters (PostgreSQL's UNLOGGED tables, MySQL's MEMORY tables): a grant writes only
//! the volatile counter, and a new durable epoch is started once per loss of the volatile
//! state. The limits on epochs, and the refusal of a token floor that would use them up, are
//! written here once for every such backend.

use crate::error::{Error, Result};
use crate::fence::FencingToken;

/// The greatest epoch: a token `epoch << 32 | counter` stays a positive `i64` (`bigint`).
pub const MAX_EPOCH: u64 = (1 << 31) - 1;

/// The last epochs, kept for the new epochs a backend starts on its own (one per loss of its
/// volatile state, or per key whose counter is used up): a token floor may not reach them.
pub const RESERVED_EPOCHS: u64 = 1 << 16;

/// The greatest epoch a token floor (`advance_token`) may be in.
pub const MAX_FLOOR_EPOCH: u64 = MAX_EPOCH - RESERVED_EPOCHS;

/// The epoch a token is in.
pub fn epoch_of(token: FencingToken) -> u64 {
    token.get() >> 32
}

/// Refuses a token floor beyond [`MAX_FLOOR_EPOCH`], before anything is written.
///
/// Epochs are shared by every key of one `scope` (a PostgreSQL schema, a MySQL installation):
/// a floor in epoch `e` makes `e` the live epoch of every key, and each later loss of the
/// volatile state starts `e + 1`, so a floor in the last epochs would leave none to start
/// after the next loss, and every grant of every key would fail from then on. `losses` names
/// what starts a new epoch in that backend ("a crash or failover").
pub fn check_floor(floor: FencingToken, scope: &str, losses: &str) -> Result<()> {
    let epoch = epoch_of(floor);
    if epoch > MAX_FLOOR_EPOCH {
        return Err(Error::config(format!(
            "token floor {floor} is in epoch {epoch}, beyond epoch {MAX_FLOOR_EPOCH}, the last \
             a floor may reach: epochs are shared by every key of the {scope}, and the last \
             {RESERVED_EPOCHS} are kept for the new epochs it starts after {losses} or when a \
             key's counter is used up (a floor there would leave the {scope} too few to go on \
             granting)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn floors_leave_the_reserved_epochs() {
        let last = FencingToken::new((MAX_FLOOR_EPOCH << 32) | 0xFFFF_FFFF).unwrap();
        assert!(check_floor(last, "schema", "a crash").is_ok());
        let beyond = FencingToken::new((MAX_FLOOR_EPOCH + 1) << 32).unwrap();
        let message = check_floor(beyond, "schema", "a crash")
            .unwrap_err()
            .to_string();
        assert!(message.contains("beyond epoch 2147418111"), "{message}");
        assert!(message.contains("every key of the schema"), "{message}");
        let largest = FencingToken::new(i64::MAX as u64 - 1).unwrap();
        assert!(check_floor(largest, "schema", "a crash").is_err());
        assert_eq!(epoch_of(FencingToken::new((7 << 32) | 3).unwrap()), 7);
    }
}
