//! Throwaway etcd members for fault runs (`fencelock chaos --spawn etcd:3`), behind the
//! `servers` feature. The lock and the storage both live on the cluster, under a key prefix of
//! the run; etcd keeps every acknowledged write across a member's kill -9, so nothing needs a
//! server of its own.

use std::sync::Arc;

use fencelock_core::tools::{SpawnFuture, SpawnRequest, SpawnedServers};
use fencelock_core::{Error, Result};
use fencelock_servers::set::{self, ServerSet};

use crate::config::EtcdConfig;
use crate::servers::{Etcd, EtcdMembers, EtcdServer};

/// `etcd://`: a cluster of `nodes` members.
pub(crate) fn etcd(request: SpawnRequest) -> SpawnFuture {
    Box::pin(spawn(request))
}

async fn spawn(request: SpawnRequest) -> Result<Box<dyn SpawnedServers>> {
    let count = request.nodes;
    if count == 0 {
        return Err(Error::config("spawning etcd needs at least one member"));
    }
    let cluster = Arc::new(set::start("etcd", move || EtcdServer::start(Etcd, count)).await?);
    let prefix = format!("fencelock-chaos/{}", request.run_tag);
    let lock = EtcdConfig::from_url(&cluster.url())?.prefix(prefix.clone());
    let described = format!(
        "{count} spawned etcd member{}, storage on the same cluster (keys under {prefix}/)",
        if count == 1 { "" } else { "s" },
    );
    // Fewer than half at a time (the one member, when there is one): a cluster of three keeps
    // its quorum, and a restarted member rejoins with its data.
    let servers = ServerSet::new("etcd", lock, described, cluster.processes())
        .kill_at_most((count.saturating_sub(1) / 2).max(1))
        .keep(cluster);
    Ok(Box::new(servers))
}
