//! Releasing a Redlock grant on every node, and waiting until a quorum of nodes says a lock
//! is free.

use std::time::Duration;

use fencelock_core::{LockKey, OwnerId, Result};
use tokio::time::Instant;

use super::call::{Arg, Code, KeyName, NodeCall};
use super::cluster::Cluster;
use super::round::Round;
use crate::codec::owner_prefix;
use crate::error::{REDLOCK, protocol};
use crate::scripts::SCRIPTS;

/// `redlock_release.lua` for the grant of `owner` on `key`, on every node: 1 where it was
/// released, 0 where this grant did not hold it.
fn release_round(cluster: &Cluster, limit: Duration, key: &LockKey, owner: OwnerId) -> Round<i64> {
    let call = NodeCall {
        code: Code::Cached(&SCRIPTS.redlock_release),
        key: key.clone(),
        keys: &[KeyName::Lock],
        args: vec![owner_prefix(owner).into(), Arg::Key(KeyName::Channel)],
    };
    cluster.round(limit, call, |reply: i64| match reply {
        0 | 1 => Ok(reply),
        other => Err(protocol(
            REDLOCK,
            format!("release script answered {other}"),
        )),
    })
}

/// Releases the grant of `owner` on `key`: `true` once a quorum released it, `false` once
/// so many nodes say it is not held by this grant that no quorum can.
pub(crate) async fn release(cluster: &Cluster, key: &LockKey, owner: OwnerId) -> Result<bool> {
    let n = cluster.nodes.len();
    let needed = cluster.needed;
    let mut round = release_round(cluster, cluster.node_timeout, key, owner);
    let outcome = loop {
        let released = round.count_ok(|r| *r == 1);
        let not_ours = round.count_ok(|r| *r == 0);
        if released >= needed {
            break Ok(true);
        }
        if not_ours > n - needed {
            break Ok(false);
        }
        if round.next().await.is_none() {
            break Err(cluster.quorum_failed(&mut round, released, describe_release));
        }
    };
    round.finish_in_background(&cluster.background, async {});
    outcome
}

/// The grant of `owner` on `key`, released on every node; the calls' outcomes are only
/// logged. The round starts at once; the future waits for its answers.
pub(crate) fn release_everywhere(
    cluster: &Cluster,
    key: &LockKey,
    owner: OwnerId,
) -> impl Future<Output = ()> + Send + 'static {
    let mut round = release_round(cluster, cluster.node_timeout, key, owner);
    let key = key.clone();
    async move {
        round.all().await;
        tracing::debug!(backend = REDLOCK, key = %key, released = round.count_ok(|r| *r == 1), "released a grant that is not handed out");
    }
}

/// Waits, at most `max`, until a quorum of nodes say the lock on `key` is free, was released,
/// or expired. The calls still waiting are dropped, which unsubscribes them.
pub(crate) async fn wait_for_release(
    cluster: &Cluster,
    key: &LockKey,
    max: Duration,
) -> Result<()> {
    // One request of this process watches the nodes for the key (`gate.rs`); the others
    // wait for that turn, at most their pause.
    let place = cluster.gates.enter(key);
    let started = Instant::now();
    let watching = match started.checked_add(max) {
        Some(deadline) => match tokio::time::timeout_at(deadline, place.turn()).await {
            Ok(watching) => watching,
            Err(_) => return Ok(()),
        },
        None => place.turn().await,
    };
    let max = max.saturating_sub(started.elapsed());
    let n = cluster.nodes.len();
    let needed = cluster.needed;
    let watched = key.clone();
    let mut round = Round::start(
        &cluster.nodes,
        max.saturating_add(cluster.node_timeout),
        move |link| {
            let key = watched.clone();
            async move { link.waiters.wait(&key, max).await }
        },
    );
    let woken = loop {
        let woken = round.count_ok(|()| true);
        if woken >= needed {
            break Ok(());
        }
        if round.count_failed() > n - needed || round.next().await.is_none() {
            break Err(cluster.quorum_failed(&mut round, woken, |()| "woken".to_owned()));
        }
    };
    drop(watching);
    woken
}

fn describe_release(answer: &i64) -> String {
    match answer {
        1 => "released".to_owned(),
        _ => "not held by this grant".to_owned(),
    }
}
