//! Tokens as `epoch << 32 | counter`: a durable epoch (one InnoDB row) over volatile per-key
//! counters (a MEMORY table, emptied by a restart together with the epoch's live marker).
//!
//! The grant's bump (`sql/next_token.sql`) writes no redo log; a durable commit happens only
//! when the volatile state was lost or a key's counter is used up (`sql/new_epoch.sql`).
//! DESIGN.md section 5.4 has the argument for why no token repeats or goes backwards.

use fencelock_core::{Error, FencingToken, Result};

/// The greatest epoch (the epoch row's CHECK): a token is a positive `BIGINT`.
pub(crate) const MAX_EPOCH: u64 = (1 << 31) - 1;

/// Epochs kept for the new epochs an installation starts on its own, one per loss of the
/// volatile state (a restart, a truncated or full counters table, a failover) or key whose
/// counter is used up: a token floor (`advance_token`) may not reach them.
pub(crate) const RESERVED_EPOCHS: u64 = 1 << 16;

/// The greatest epoch a token floor may be in (`sql/advance_token.sql` checks it too).
pub(crate) const MAX_FLOOR_EPOCH: u64 = MAX_EPOCH - RESERVED_EPOCHS;

/// The SQLSTATE `advance_token_v2` raises for a floor past [`MAX_FLOOR_EPOCH`].
pub(crate) const FLOOR_SQLSTATE: &str = "FL006";

/// Refuses a token floor beyond [`MAX_FLOOR_EPOCH`], before anything is written. Epochs are
/// shared by every key of an installation: a floor in epoch `e` makes `e` the live epoch of
/// every key, and each later loss of the volatile state starts `e + 1`, so a floor in the
/// last epochs would leave none to start after the next restart, and every grant of every
/// key would fail from then on.
pub(crate) fn check_floor(floor: FencingToken) -> Result<()> {
    let epoch = floor.get() >> 32;
    if epoch > MAX_FLOOR_EPOCH {
        return Err(Error::config(format!(
            "token floor {floor} is in epoch {epoch}, beyond epoch {MAX_FLOOR_EPOCH}, the last \
             a floor may reach: epochs are shared by every key of the installation, and the \
             last {RESERVED_EPOCHS} are kept for the new epochs it starts after a restart or \
             when a key's counter is used up (a floor there would leave too few to go on \
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
        assert!(check_floor(last).is_ok());
        let beyond = FencingToken::new((MAX_FLOOR_EPOCH + 1) << 32).unwrap();
        let message = check_floor(beyond).unwrap_err().to_string();
        assert!(message.contains("beyond epoch 2147418111"), "{message}");
        assert!(check_floor(FencingToken::new(i64::MAX as u64 - 1).unwrap()).is_err());
    }

    #[test]
    fn the_sql_limits_are_these() {
        let advance = include_str!("../sql/advance_token.sql");
        assert!(advance.contains(&format!("p_floor >> 32 > {MAX_FLOOR_EPOCH}")));
        assert!(advance.contains(FLOOR_SQLSTATE));
        let table = include_str!("../sql/epoch_table.sql");
        assert!(table.contains(&format!("BETWEEN 0 AND {MAX_EPOCH}")));
        let new_epoch = include_str!("../sql/new_epoch.sql");
        assert!(new_epoch.contains(&format!("p_epoch > {MAX_EPOCH}")));
    }
}
