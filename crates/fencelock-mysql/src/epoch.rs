//! Tokens as `epoch << 32 | counter`: a durable epoch (one InnoDB row) over volatile per-key
//! counters (a MEMORY table, emptied by a restart together with the epoch's live marker).
//!
//! The grant's bump (`sql/next_token.sql`) writes no redo log; a durable commit happens only
//! when the volatile state was lost or a key's counter is used up (`sql/new_epoch.sql`).
//! DESIGN.md section 5.4 has the argument for why no token repeats or goes backwards.

use fencelock_core::{FencingToken, Result};

/// The SQLSTATE `advance_token_v2` raises for a floor past [`fencelock_core::epoch::MAX_FLOOR_EPOCH`].
pub(crate) const FLOOR_SQLSTATE: &str = "FL006";

/// Refuses a token floor that would use up the installation's epochs (see
/// [`fencelock_core::epoch::check_floor`]), before anything is written.
pub(crate) fn check_floor(floor: FencingToken) -> Result<()> {
    fencelock_core::epoch::check_floor(floor, "prefix", "a restart, a lost counters table")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use fencelock_core::epoch::{MAX_EPOCH, MAX_FLOOR_EPOCH};

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
