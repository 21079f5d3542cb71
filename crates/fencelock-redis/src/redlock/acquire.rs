//! Acquiring a Redlock grant: a quorum of nodes, one token, a validity left after the round.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, FencingToken, Lease, LockKey, OwnerId, Result, valid_until};
use tokio::time::Instant;

use super::call::{Code, KeyName, NodeCall};
use super::cluster::Cluster;
use super::release::release_everywhere;
use super::round::{Answer, Round};
use super::settle::settle;
use crate::codec::{parse_token, ttl_millis};
use crate::error::{REDLOCK, protocol};
use crate::scripts::ACQUIRE;

/// An acquisition in flight. Dropped while armed (a failed acquisition, or a caller that gave
/// up on the future), it releases the grant on every node at once, in the background, and
/// once more on the nodes whose calls were still in flight after those calls end, so a grant
/// that lands late is released too. Disarmed (a lease handed out), it only lets the calls end.
/// Either way the tasks are counted in the cluster's background work.
struct Acquisition {
    round: Round<Option<FencingToken>>,
    cluster: Arc<Cluster>,
    armed: Option<(LockKey, OwnerId)>,
}

impl Drop for Acquisition {
    fn drop(&mut self) {
        let round = self.round.take();
        let cluster = &self.cluster;
        match self.armed.take() {
            Some((key, owner)) => {
                cluster
                    .background
                    .spawn(release_everywhere(cluster, &key, owner));
                if round.pending() > 0 {
                    round.finish_in_background(
                        &cluster.background,
                        release_everywhere(cluster, &key, owner),
                    );
                }
            }
            None => round.finish_in_background(&cluster.background, async {}),
        }
    }
}

/// Asks every node for the lock on `key`. With a quorum of grants, the token is the highest
/// of the granting nodes' counters (written back to a quorum first when they differ), and the
/// lease is valid for `ttl - elapsed - drift` from before the first request. `Ok(None)` when
/// other owners hold the lock on so many nodes that no quorum is possible.
pub(crate) async fn acquire(
    cluster: &Arc<Cluster>,
    key: &LockKey,
    ttl: Duration,
) -> Result<Option<Lease>> {
    let n = cluster.nodes.len();
    let needed = cluster.needed;
    let owner = OwnerId::random();
    let limit = cluster.node_timeout.min(ttl);
    let sent_at = Instant::now();
    // EVAL, not EVALSHA: after a restart EVALSHA answers NOSCRIPT and is sent again after
    // loading the script, which would let a release sent meanwhile run before this grant and
    // leave the grant behind. One EVAL keeps the connection's order.
    let call = NodeCall {
        code: Code::Eval(ACQUIRE.as_str()),
        key: key.clone(),
        keys: &[KeyName::Lock, KeyName::Token],
        args: vec![owner.to_string().into(), ttl_millis(ttl).to_string().into()],
    };
    let round = cluster.round(limit, call, |reply: Option<String>| {
        reply
            .as_deref()
            .map(|t| parse_token(REDLOCK, t))
            .transpose()
    });
    let mut acquisition = Acquisition {
        round,
        cluster: Arc::clone(cluster),
        armed: Some((key.clone(), owner)),
    };
    let round = &mut acquisition.round;
    loop {
        let granted = round.count_ok(Option::is_some);
        if granted >= needed {
            break;
        }
        if granted + round.pending() < needed {
            if round.count_ok(Option::is_none) > n - needed {
                return Ok(None);
            }
            return Err(cluster.quorum_failed(round, granted, describe_grant));
        }
        round.next().await;
    }
    let tokens: Vec<FencingToken> = round
        .answers()
        .filter_map(|a| match a {
            Answer::Ok(Some(t)) => Some(*t),
            _ => None,
        })
        .collect();
    let (Some(&token), Some(&lowest)) = (tokens.iter().max(), tokens.iter().min()) else {
        return Err(protocol(
            REDLOCK,
            "acquire: a quorum granted without tokens",
        ));
    };
    if lowest != token {
        settle(cluster, key, owner, token).await?;
    }
    let valid_until = valid_until(sent_at, ttl);
    if Instant::now() >= valid_until {
        return Err(Error::Unavailable {
            backend: REDLOCK,
            message: format!(
                "a quorum granted {key:?} only after {:?}, which leaves nothing of the {ttl:?} ttl less the drift margin; released",
                sent_at.elapsed()
            ),
            source: None,
        });
    }
    acquisition.armed = None;
    Ok(Some(Lease {
        key: key.clone(),
        owner,
        token,
        ttl,
        valid_until,
    }))
}

fn describe_grant(answer: &Option<FencingToken>) -> String {
    match answer {
        Some(token) => format!("granted token {token}"),
        None => "held by another owner".to_owned(),
    }
}
