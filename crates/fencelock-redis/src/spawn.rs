//! Throwaway redis-server processes for fault runs (`fencelock chaos --spawn redis` and
//! `--spawn redlock:N`), behind the `servers` feature.
//!
//! The storage lives on a persistent server of its own that is never killed, unless the one
//! lock server is persistent itself: a storage that loses admitted writes in a kill is data
//! loss, not a fencing failure, so a run must never blame the fence for it.

use std::sync::Arc;

use fencelock_core::tools::{SpawnFuture, SpawnRequest, SpawnedServers};
use fencelock_core::{Error, Result};
use fencelock_servers::set::{self, Process, ServerSet};

use crate::config::RedisConfig;
use crate::redlock::RedlockConfig;
use crate::servers::{RedisServer, RedisServerOptions};

/// `redis://`: one server.
pub(crate) fn redis(request: SpawnRequest) -> SpawnFuture {
    Box::pin(spawn(request, false))
}

/// `redlock://`: `nodes` independent servers.
pub(crate) fn redlock(request: SpawnRequest) -> SpawnFuture {
    Box::pin(spawn(request, true))
}

async fn spawn(request: SpawnRequest, redlock: bool) -> Result<Box<dyn SpawnedServers>> {
    let count = request.nodes;
    match (redlock, count) {
        (_, 0) => return Err(Error::config("spawning Redis needs at least one node")),
        (false, 2..) => {
            return Err(Error::config(format!(
                "redis:// is one server: spawn redlock:{count} for {count} independent nodes"
            )));
        }
        _ => {}
    }
    let options = if request.durable {
        RedisServerOptions::persistent()
    } else {
        RedisServerOptions::default()
    };
    let mut nodes = Vec::with_capacity(count);
    for _ in 0..count {
        let options = options.clone();
        nodes.push(Arc::new(
            set::start("redis-server", move || RedisServer::try_spawn_with(options)).await?,
        ));
    }
    let shared_storage = count == 1 && request.durable;
    let storage_node = if shared_storage {
        None
    } else {
        Some(Arc::new(
            set::start("redis-server", || {
                RedisServer::try_spawn_with(RedisServerOptions::persistent())
            })
            .await?,
        ))
    };
    let described = format!(
        "{count} spawned redis-server node{} ({}), storage on {}",
        if count == 1 { "" } else { "s" },
        if request.durable {
            "AOF, appendfsync always"
        } else {
            "no persistence"
        },
        if shared_storage {
            "the same node"
        } else {
            "a separate persistent node that is never killed"
        }
    );
    let processes = nodes
        .iter()
        .map(|node| node.clone() as Arc<dyn Process>)
        .collect();
    // One node, or a minority of Redlock's.
    let kill_at_most = (count / 2).max(1);
    let mut servers = if redlock {
        let lock = RedlockConfig::new(nodes.iter().map(|n| n.url()));
        ServerSet::new("redis-server", lock, described, processes)
    } else {
        let lock = RedisConfig::from_url(&nodes[0].url())?;
        ServerSet::new("redis-server", lock, described, processes)
    }
    .kill_at_most(kill_at_most);
    if let Some(node) = storage_node {
        servers = servers
            .storage(RedisConfig::from_url(&node.url())?)
            .keep(node);
    }
    Ok(Box::new(servers))
}
