//! Tokens as epoch * 2^32 + counter: a durable epoch over volatile (UNLOGGED) counters.
//!
//! The grant statements (`lease_acquire.sql`, `advisory_acquire.sql`, `token_grant.sql`) write
//! only UNLOGGED tables, so their commit waits for no WAL flush. When the volatile state was
//! lost (crash recovery, a promoted standby, a restored physical backup) or a key's counter is
//! used up, they hand out nothing and say so; the caller then starts a new epoch with
//! [`start_new`] (one synchronous commit) and runs the grant again. DESIGN.md section 5.3 has
//! the argument for why no token is handed out twice.

use std::time::Duration;

use fencelock_core::{Error, FencingToken, Result};
use sqlx::Acquire;
use sqlx::Postgres;

use crate::PgDatabase;
use crate::error::timed;
use crate::exec::{Arg, Protocol};

/// How many new epochs one grant may ask for before it gives up: one for a lost state, one
/// for a counter used up right after, and one for a race with a concurrent loss.
pub(crate) const TRIES: usize = 3;

/// Refuses a token floor that would use up the schema's epochs (see
/// [`fencelock_core::epoch::check_floor`]).
pub(crate) fn check_floor(floor: FencingToken) -> Result<()> {
    fencelock_core::epoch::check_floor(floor, "schema", "a crash, failover or restore")
}

/// What a grant statement returned: the token, or why there is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Granted with this token.
    Token(i64),
    /// No live epoch (`None`: the volatile state was lost), or the key's counter is used up
    /// in the live epoch `Some(e)`: start a new epoch, then run the grant again.
    NewEpoch(Option<i64>),
    /// Not granted for another reason (the lock is held, or a racing grant won).
    Refused,
}

impl Grant {
    /// From the `token`, `live` and `exhausted` columns of a grant statement.
    pub(crate) fn from_columns(token: Option<i64>, live: Option<i64>, exhausted: bool) -> Self {
        match (token, live) {
            (Some(token), _) => Grant::Token(token),
            (None, None) => Grant::NewEpoch(None),
            (None, Some(live)) if exhausted => Grant::NewEpoch(Some(live)),
            (None, Some(_)) => Grant::Refused,
        }
    }
}

/// Starts a new durable epoch unless another caller already replaced `seen` (see
/// `fencelock_new_epoch`). One synchronous commit; runs on its own pooled connection.
pub(crate) async fn start_new<'e, A>(
    db: &PgDatabase,
    backend: &'static str,
    protocol: Protocol,
    executor: A,
    seen: Option<i64>,
) -> Result<i64>
where
    A: Acquire<'e, Database = Postgres> + Send + 'e,
{
    tracing::debug!(seen, "starting a new token epoch");
    let args = [Arg::OptInt8(seen)];
    let epoch: i64 = timed(
        backend,
        // The commit waits for its WAL flush (and a synchronous standby, if any).
        db.operation_timeout()
            .saturating_add(Duration::from_secs(1)),
        db.sql().new_epoch.scalar_one(protocol, executor, &args),
    )
    .await?;
    tracing::info!(epoch, "new token epoch");
    Ok(epoch)
}

/// The error when a grant asked for [`TRIES`] new epochs and still got no token.
pub(crate) fn no_token(backend: &'static str) -> Error {
    crate::error::protocol(
        backend,
        "no token after starting new epochs: the live epoch keeps disappearing",
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn columns_say_what_to_do() {
        assert_eq!(
            Grant::from_columns(Some(7), Some(1), false),
            Grant::Token(7)
        );
        assert_eq!(
            Grant::from_columns(None, None, false),
            Grant::NewEpoch(None)
        );
        assert_eq!(
            Grant::from_columns(None, Some(3), true),
            Grant::NewEpoch(Some(3))
        );
        assert_eq!(Grant::from_columns(None, Some(3), false), Grant::Refused);
    }
}
