//! Throwaway ZooKeeper servers for fault runs (`fencelock chaos --spawn zookeeper:3`), behind
//! the `servers` feature. The lock and the storage both live on the ensemble, under a prefix
//! znode of the run; ZooKeeper logs every acknowledged write to disk before it answers, so a
//! killed member comes back with it and nothing needs a server of its own.

use std::sync::Arc;

use fencelock_core::tools::{SpawnFuture, SpawnRequest, SpawnedServers};
use fencelock_core::{Error, Result};
use fencelock_servers::set::{self, ServerSet};

use crate::config::ZkConfig;
use crate::servers::{ZkMembers, ZkServer, ZooKeeper};

/// `zookeeper://`: an ensemble of `nodes` servers.
pub(crate) fn zookeeper(request: SpawnRequest) -> SpawnFuture {
    Box::pin(spawn(request))
}

async fn spawn(request: SpawnRequest) -> Result<Box<dyn SpawnedServers>> {
    let count = request.nodes;
    if count == 0 {
        return Err(Error::config(
            "spawning ZooKeeper needs at least one server",
        ));
    }
    let ensemble = Arc::new(
        set::start("zookeeper", move || {
            ZkServer::start(ZooKeeper::plain(), count)
        })
        .await?,
    );
    let prefix = format!("fencelock-chaos-{}", request.run_tag);
    let lock = ZkConfig::from_url(&ensemble.url())?.prefix(prefix.clone());
    let described = format!(
        "{count} spawned ZooKeeper server{}, storage on the same ensemble (znodes under /{prefix})",
        if count == 1 { "" } else { "s" },
    );
    // Fewer than half at a time (the one server, when there is one): an ensemble of three
    // keeps its quorum, and a restarted server rejoins with its data.
    let servers = ServerSet::new("zookeeper", lock, described, ensemble.processes())
        .kill_at_most((count.saturating_sub(1) / 2).max(1))
        .keep(ensemble);
    Ok(Box::new(servers))
}
