//! Extending a Redlock grant: a quorum still holding it, and validity left.

use std::time::Duration;

use fencelock_core::{Error, Lease, LostReason, Result, valid_until};
use tokio::time::Instant;

use super::call::{Code, KeyName, NodeCall};
use super::cluster::Cluster;
use crate::codec::{owner_prefix, ttl_millis};
use crate::error::{REDLOCK, protocol};
use crate::scripts::SCRIPTS;

/// Renews `lease` for `ttl` on every node where this grant still holds the lock. A quorum of
/// renewals and validity left give the renewed lease; a quorum of nodes where the lock is
/// gone or held by another owner is [`Error::LeaseLost`].
pub(crate) async fn extend(cluster: &Cluster, lease: &Lease, ttl: Duration) -> Result<Lease> {
    let n = cluster.nodes.len();
    let needed = cluster.needed;
    let limit = cluster.node_timeout.min(ttl);
    let sent_at = Instant::now();
    let call = NodeCall {
        code: Code::Cached(&SCRIPTS.redlock_extend),
        key: lease.key.clone(),
        keys: &[KeyName::Lock],
        args: vec![
            owner_prefix(lease.owner).into(),
            ttl_millis(ttl).to_string().into(),
        ],
    };
    let mut round = cluster.round(limit, call, |reply: i64| match reply {
        -1..=1 => Ok(reply),
        other => Err(protocol(REDLOCK, format!("extend script answered {other}"))),
    });
    let outcome = loop {
        let extended = round.count_ok(|r| *r == 1);
        if extended >= needed {
            break Ok(());
        }
        let lost = round.count_ok(|r| *r != 1);
        if lost > n - needed {
            let reason = if round.count_ok(|r| *r == -1) > 0 {
                LostReason::Superseded
            } else {
                LostReason::NotHeld
            };
            break Err(Error::lease_lost(&lease.key, reason));
        }
        if extended + round.pending() < needed {
            break Err(cluster.quorum_failed(&mut round, extended, describe_extend));
        }
        round.next().await;
    };
    round.finish_in_background(&cluster.background, async {});
    outcome?;
    let valid_until = valid_until(sent_at, ttl);
    if Instant::now() >= valid_until {
        return Err(Error::Unavailable {
            backend: REDLOCK,
            message: format!(
                "a quorum extended {:?} only after {:?}, which leaves nothing of the {ttl:?} ttl less the drift margin",
                lease.key,
                sent_at.elapsed()
            ),
            source: None,
        });
    }
    Ok(Lease {
        ttl,
        valid_until,
        ..lease.clone()
    })
}

fn describe_extend(answer: &i64) -> String {
    match answer {
        1 => "extended".to_owned(),
        0 => "lock gone".to_owned(),
        _ => "held by another owner".to_owned(),
    }
}
