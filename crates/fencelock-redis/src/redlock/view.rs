//! `inspect` on Redlock: the majority view of a lock.

use std::collections::HashMap;
use std::time::Duration;

use fencelock_core::{Fence, FencingToken, LockInfo, LockKey, OwnerId, Result};

use super::call::{Code, KeyName, NodeCall};
use super::cluster::Cluster;
use super::round::Answer;
use crate::codec::{parse_lock_value, parse_token};
use crate::error::REDLOCK;
use crate::scripts::SCRIPTS;

/// What one node reported.
struct NodeView {
    holder: Option<Fence>,
    remaining: Option<Duration>,
    last: Option<FencingToken>,
}

/// The holder agreed by a quorum (with the token most of its nodes carry, and the time for
/// which a quorum still holds it) and the highest counter of the nodes that answered.
pub(crate) async fn majority_view(cluster: &Cluster, key: &LockKey) -> Result<LockInfo> {
    let needed = cluster.needed;
    let call = NodeCall {
        code: Code::Cached(&SCRIPTS.inspect),
        key: key.clone(),
        keys: &[KeyName::Lock, KeyName::Token],
        args: Vec::new(),
    };
    let mut round = cluster.round(
        cluster.node_timeout,
        call,
        |(value, pttl, last): (Option<String>, i64, Option<String>)| {
            let holder = value
                .as_deref()
                .map(|v| parse_lock_value(REDLOCK, v))
                .transpose()?;
            Ok(NodeView {
                holder,
                remaining: (holder.is_some() && pttl >= 0)
                    .then(|| Duration::from_millis(pttl.unsigned_abs())),
                last: last
                    .as_deref()
                    .map(|t| parse_token(REDLOCK, t))
                    .transpose()?,
            })
        },
    );
    round.all().await;
    let answered = round.count_ok(|_| true);
    if answered < needed {
        return Err(cluster.quorum_failed(&mut round, answered, |_| "answered".to_owned()));
    }
    let views: Vec<&NodeView> = round
        .answers()
        .filter_map(|a| match a {
            Answer::Ok(view) => Some(view),
            _ => None,
        })
        .collect();
    let mut by_owner: HashMap<OwnerId, Vec<&NodeView>> = HashMap::new();
    for view in &views {
        if let Some(holder) = view.holder {
            by_owner.entry(holder.owner).or_default().push(view);
        }
    }
    let (holder, remaining) = match by_owner.into_iter().find(|(_, held)| held.len() >= needed) {
        Some((owner, held)) => {
            // Late or unsettled nodes may carry their own counter in the value; the token
            // most nodes agree on is the grant's.
            let mut counts: HashMap<FencingToken, usize> = HashMap::new();
            for view in &held {
                if let Some(h) = view.holder {
                    *counts.entry(h.token).or_default() += 1;
                }
            }
            let token = counts
                .into_iter()
                .max_by_key(|(token, count)| (*count, *token))
                .map(|(token, _)| token);
            // Held for as long as a quorum still holds it.
            let mut left: Vec<Duration> = held.iter().filter_map(|v| v.remaining).collect();
            left.sort_unstable_by(|a, b| b.cmp(a));
            (
                token.map(|t| Fence::new(t, owner)),
                left.get(needed - 1).copied(),
            )
        }
        None => (None, None),
    };
    let mut info = LockInfo::new(key.clone());
    info.holder = holder;
    info.remaining = remaining;
    info.last_token = views.iter().filter_map(|v| v.last).max();
    Ok(info)
}
