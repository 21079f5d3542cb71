//! What `fencelock bench` measures fencelock's Redis backends against: the raw commands a
//! user would write on the same server ([`RedisBaseline`], [`RedisClusterBaseline`]), with the
//! `rslock` feature the `rslock` crate's Redlock on the same servers (`RslockPeer`), and the
//! kits [`BackendConfig::bench_kit`](fencelock_core::BackendConfig::bench_kit) hands out
//! (baseline, peers, and the sweep of a run's keys, which knows this crate's key names).

mod cleanup;
mod cluster;
mod one_node;
#[cfg(feature = "rslock")]
mod rslock_peer;

use std::sync::Arc;

use fencelock_core::tools::{BenchKit, Peer};
use fencelock_core::{Connected, Error, Result};

pub use cluster::RedisClusterBaseline;
pub use one_node::RedisBaseline;
#[cfg(feature = "rslock")]
#[cfg_attr(docsrs, doc(cfg(feature = "rslock")))]
pub use rslock_peer::RslockPeer;

use crate::cluster::RedisClusterConfig;
use crate::config::RedisConfig;
use crate::redlock::RedlockConfig;
use cleanup::RedisCleanup;
use cluster::RedisClusterCleanup;

/// fencelock's one-node backend on the server `config` names (its key prefix and timeouts),
/// with [`RedisStorage`](crate::RedisStorage) on the same server, against raw commands on a
/// connection of its own to that server, with the `rslock` crate on that server as a peer
/// (feature `rslock`). Named `redis`.
pub(crate) async fn redis_kit(config: &RedisConfig) -> Result<BenchKit> {
    let backend = RedisConfig::connect(config).await?;
    let cleanup = RedisCleanup::new(backend.prefix(), [config]);
    let fenced = Connected {
        storage: Arc::new(backend.storage()),
        backend: Arc::new(backend),
    };
    let baseline = RedisBaseline::connect(config).await?;
    let kit = BenchKit::new("redis", fenced, Arc::new(baseline)).cleanup(Arc::new(cleanup));
    with_rslock(kit, std::slice::from_ref(config)).await
}

/// Redlock over the nodes of `config`, fenced data on its storage server
/// ([`RedlockConfig::storage`], by default the first node), against raw commands on the first
/// node, with fencelock's one-node backend on that node (same key prefix) as a peer: the cost
/// of the quorum is Redlock's ratio to it. With the `rslock` feature, the `rslock` crate over
/// the same nodes is a peer too. Named `redlock-<nodes>`.
pub(crate) async fn redlock_kit(config: &RedlockConfig) -> Result<BenchKit> {
    let first = config
        .node_configs()
        .first()
        .ok_or_else(|| Error::Backend {
            backend: "bench",
            message: "Redlock needs at least one node".into(),
            source: None,
        })?;
    let backend = RedlockConfig::connect(config).await?;
    let storage = RedlockConfig::connect_storage(config).await?;
    let one_node = first.clone().prefix(backend.prefix()).connect().await?;
    let peer = Connected {
        storage: Arc::new(one_node.storage()),
        backend: Arc::new(one_node),
    };
    let baseline = RedisBaseline::connect(first).await?;
    let cleanup = RedisCleanup::for_redlock(backend.prefix(), config);
    let fenced = Connected {
        backend: Arc::new(backend),
        storage: Arc::new(storage),
    };
    let kit = BenchKit::new(
        format!("redlock-{}", config.node_configs().len()),
        fenced,
        Arc::new(baseline),
    )
    .peer(Peer::Fenced(peer))
    .cleanup(Arc::new(cleanup));
    with_rslock(kit, config.node_configs()).await
}

/// `kit` with the `rslock` crate over `servers` as a raw peer.
#[cfg(feature = "rslock")]
async fn with_rslock(kit: BenchKit, servers: &[RedisConfig]) -> Result<BenchKit> {
    let peer = RslockPeer::connect(servers).await?;
    Ok(kit.peer(Peer::Raw(Arc::new(peer))))
}

/// Without the `rslock` feature, `kit` as it is.
#[cfg(not(feature = "rslock"))]
async fn with_rslock(kit: BenchKit, _servers: &[RedisConfig]) -> Result<BenchKit> {
    Ok(kit)
}

/// fencelock's [`RedisClusterBackend`](crate::RedisClusterBackend) on the cluster `config`
/// names (its key prefix and timeouts), with its storage on the same connection, against raw
/// commands through a cluster connection of its own. Named `redis-cluster`.
pub(crate) async fn redis_cluster_kit(config: &RedisClusterConfig) -> Result<BenchKit> {
    let backend = RedisClusterConfig::connect(config).await?;
    let baseline = RedisClusterBaseline::connect(config).await?;
    let cleanup = RedisClusterCleanup::new(backend.clone(), baseline.connection());
    let fenced = Connected {
        storage: Arc::new(backend.storage()),
        backend: Arc::new(backend),
    };
    Ok(BenchKit::new("redis-cluster", fenced, Arc::new(baseline)).cleanup(Arc::new(cleanup)))
}
