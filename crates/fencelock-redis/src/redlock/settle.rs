//! Raising the nodes' token counters: writing a grant's token back to a quorum (settle), and
//! `advance_token`.

use fencelock_core::{FencingToken, LockKey, OwnerId, Result};

use super::call::{Code, KeyName, NodeCall};
use super::cluster::Cluster;
use super::round::Answer;
use crate::codec::parse_token;
use crate::error::{REDLOCK, protocol};
use crate::scripts::SCRIPTS;

/// Writes `token` back to a quorum: each node's counter raised to at least `token`, and the
/// lock value made to carry it where this grant holds the lock.
///
/// Any two quorums share a node, so once a quorum's counters are at least `token`, the next
/// grant's quorum contains one of them and hands out a higher token.
pub(crate) async fn settle(
    cluster: &Cluster,
    key: &LockKey,
    owner: OwnerId,
    token: FencingToken,
) -> Result<()> {
    let call = NodeCall {
        code: Code::Cached(&SCRIPTS.redlock_settle),
        key: key.clone(),
        keys: &[KeyName::Token, KeyName::Lock],
        args: vec![token.get().to_string().into(), owner.to_string().into()],
    };
    let mut round = cluster.round(cluster.node_timeout, call, |reply: String| {
        parse_token(REDLOCK, &reply)
    });
    let outcome = loop {
        let settled = round.count_ok(|t| *t >= token);
        if settled >= cluster.needed {
            break Ok(());
        }
        if settled + round.pending() < cluster.needed {
            break Err(cluster.quorum_failed(&mut round, settled, |t| format!("counter at {t}")));
        }
        round.next().await;
    };
    round.finish_in_background(&cluster.background, async {});
    outcome
}

/// Raises every reachable node's counter to at least `floor` (a quorum is needed) and returns
/// the highest counter afterwards.
pub(crate) async fn advance_token(
    cluster: &Cluster,
    key: &LockKey,
    floor: FencingToken,
) -> Result<FencingToken> {
    let call = NodeCall {
        code: Code::Cached(&SCRIPTS.advance_token),
        key: key.clone(),
        keys: &[KeyName::Token],
        args: vec![floor.get().to_string().into()],
    };
    let mut round = cluster.round(cluster.node_timeout, call, |reply: String| {
        parse_token(REDLOCK, &reply)
    });
    round.all().await;
    let raised = round.count_ok(|_| true);
    if raised < cluster.needed {
        return Err(cluster.quorum_failed(&mut round, raised, |t| format!("raised to {t}")));
    }
    round
        .answers()
        .filter_map(|a| match a {
            Answer::Ok(t) => Some(*t),
            _ => None,
        })
        .max()
        .ok_or_else(|| protocol(REDLOCK, "advance_token: no node answered"))
}
