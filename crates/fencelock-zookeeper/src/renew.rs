//! The one renewal of a held node, shared by exclusive grants (`extend`) and readers
//! (`extend_shared`): a `setData` at the version this process last wrote, the same mapping
//! of its failures to a lost lease, and the deletion of a node found to have lapsed.

use fencelock_core::{LostReason, Result};
use zookeeper_client as zk;

use crate::backend::{Grant, ZkLockBackend, expired};
use crate::error::mapped;

impl ZkLockBackend {
    /// Rewrites `grant`'s node with `data` (which carries the new ttl, `ttl_ms`) at the
    /// version this process last wrote. The node as renewed, or why the lease is lost:
    ///
    /// - the session ended (known locally, or `SessionExpired`): `SessionEnded`;
    /// - the node is gone or was written by someone else (`NoNode`, `BadVersion`): `NotHeld`;
    /// - the new `mtime` shows the node had lapsed before this write (on the leader's clock):
    ///   the node is deleted at the version just written, and `NotHeld`: a lapsed lease is
    ///   never revived, since a contender may have been granted after it lapsed.
    ///
    /// Anything else (a connection loss, a time-out) is an error: the lease may still be held.
    pub(crate) async fn renew_node(
        &self,
        grant: &Grant,
        data: &[u8],
        ttl_ms: u64,
        what: &'static str,
    ) -> Result<std::result::Result<Grant, LostReason>> {
        if grant.session.lost.is_cancelled() {
            return Ok(Err(LostReason::SessionEnded));
        }
        let written = self
            .call(
                what,
                grant
                    .session
                    .client
                    .set_data(&grant.path, data, Some(grant.version)),
            )
            .await?;
        let stat = match written {
            Ok(stat) => stat,
            Err(zk::Error::NoNode | zk::Error::BadVersion) => return Ok(Err(LostReason::NotHeld)),
            Err(zk::Error::SessionExpired) => return Ok(Err(LostReason::SessionEnded)),
            Err(e) => return Err(mapped(e, what)),
        };
        if expired(grant.mtime, grant.ttl_ms, stat.mtime) {
            // Best effort: a node left behind lapses again and the next contender removes it.
            let _ = self
                .call(
                    "drop a lapsed node",
                    grant.session.client.delete(&grant.path, Some(stat.version)),
                )
                .await;
            return Ok(Err(LostReason::NotHeld));
        }
        Ok(Ok(Grant {
            version: stat.version,
            mtime: stat.mtime,
            ttl_ms,
            ..grant.clone()
        }))
    }
}
