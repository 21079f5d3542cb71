//! Wake-ups by polling, for a Redis Cluster, where the driver's cluster connection offers no
//! pub/sub connection of the kind `Waiters` uses.

use std::time::Duration;

use fencelock_core::{LockKey, Result};
use tokio::time::Instant;

use crate::connection::Connection;

/// How often [`poll_release`] asks whether a lock is still held.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Waits until the lock on `key` may have been released, at most `max`, by asking for the
/// lock's remaining time every [`POLL_INTERVAL`] (and not past the holder's expiry). For a
/// Redis Cluster, where the driver's cluster connection offers no pub/sub connection of the
/// kind `Waiters` uses: a release is seen within one interval instead of at once.
pub(crate) async fn poll_release(conn: &Connection, key: &LockKey, max: Duration) -> Result<()> {
    let deadline = Instant::now().checked_add(max);
    let lock = conn.keys.lock(key);
    loop {
        let mut link = conn.link.clone();
        let pttl: i64 = conn
            .call("PTTL", redis::cmd("PTTL").arg(&lock).query_async(&mut link))
            .await?;
        // -2: no lock; 0: expiring right now.
        if pttl == -2 || pttl == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut until = now + POLL_INTERVAL;
        if pttl > 0 {
            until = until.min(now + Duration::from_millis(pttl.unsigned_abs()));
        }
        if let Some(deadline) = deadline {
            if now >= deadline {
                return Ok(());
            }
            until = until.min(deadline);
        }
        tokio::time::sleep_until(until).await;
    }
}
