//! `RedisClusterBackend`: the lock backend on a Redis Cluster, and the storage next to it.
//!
//! The same Lua scripts as on one server: every key of one lock key (lock, counter, data,
//! fence record) carries the key's hash tag, so each script's keys live in one slot and the
//! driver routes it to the master serving that slot, following `MOVED` and `ASK`.

mod config;
mod connect;

use fencelock_core::{
    Capabilities, FenceRule, HostPort, LockKinds, Result, TimeAuthority, TokenGuarantee, WakeUp,
};
use redis::cluster_async::ClusterConnection;

pub use config::RedisClusterConfig;

use crate::backend::{Locks, Wake};
use crate::codec::MAX_TTL;
use crate::delegate::delegate_lock_backend;
use crate::fence::RedisFence;
use crate::storage::RedisStorage;

/// A [`LockBackend`](fencelock_core::LockBackend) on a Redis Cluster.
///
/// Keys, scripts and tokens are those of [`RedisLockBackend`](crate::RedisLockBackend): each
/// lock key `k` has `{prefix}:{k}:lock` and `{prefix}:{k}:token` (and, during a read phase,
/// `{prefix}:{k}:readers`; for the storage, `{prefix}:{k}:data`), all in the slot of the hash
/// tag `{k}`, so each operation is one atomic script on the master serving that slot. The
/// driver follows `MOVED` (a slot moved for good) and `ASK` (a slot being moved) and
/// refreshes its slot map; a script a node has not cached is sent whole to that node.
///
/// **What a failover does.** Replication is asynchronous: a master acknowledges a grant (the
/// lock set, the counter incremented) before its replica has it. If the master dies then and
/// the replica is promoted, the grant is gone: another client can be granted the same lock
/// while the first still holds it, and the counter may hand out a token again. That is
/// why [`Capabilities::tokens`] says
/// `DurableIfServerPersists { server_persists: Some(false) }` for a cluster whose masters have
/// replicas, whatever their persistence. The fence keeps data safe anyway: a storage that
/// admitted token `t` refuses every operation with a token at or below `t` from another
/// owner, so a repeated token fences the *new* holder out (a liveness failure, never lost
/// data), and [`advance_token`](fencelock_core::LockBackend::advance_token) to the storage's
/// last token restores liveness. Counters on a cluster without replicas survive a master
/// restart only with `appendonly yes` and `appendfsync always` on every master.
///
/// **Waiting.** The driver's cluster connection gives no pub/sub connection to listen on, so
/// [`wait_for_release`](fencelock_core::LockBackend::wait_for_release) polls the lock's
/// remaining time every 25 ms (never past the holder's expiry); [`Capabilities::wake_up`] is
/// [`WakeUp::Poll`]. Releases still publish, for anyone subscribed on a node.
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_core::{LockBackend, LockKey};
/// use fencelock_redis::RedisClusterConfig;
///
/// let backend = RedisClusterConfig::from_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")?
///     .connect()
///     .await?;
/// let key = LockKey::new("reports/daily")?;
/// if let Some(lease) = backend.try_acquire(&key, Duration::from_secs(10)).await? {
///     backend.release(&lease).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisClusterBackend {
    locks: Locks,
    cluster: ClusterConnection,
    masters: usize,
    replicated: bool,
}

impl std::fmt::Debug for RedisClusterBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClusterBackend")
            .field("locks", &self.locks)
            .field("masters", &self.masters)
            .field("replicated", &self.replicated)
            .finish_non_exhaustive()
    }
}

delegate_lock_backend!(RedisClusterBackend);

impl RedisClusterConfig {
    /// Connects a [`RedisClusterBackend`]: reaches the cluster through its seeds, reads its
    /// masters and replicas, and reads `maxmemory-policy` and the persistence settings with
    /// `CONFIG GET` on **every master**; a master that may evict keys fails the connect with
    /// [`Error::InvalidConfig`](fencelock_core::Error::InvalidConfig) naming it, unless
    /// [`allow_eviction`](Self::allow_eviction) is set (a master that refuses `CONFIG GET`
    /// cannot be checked and is served). Unreachable seeds and refused credentials are
    /// reported naming the seeds.
    pub async fn connect(&self) -> Result<RedisClusterBackend> {
        let (conn, cluster, topology) = connect::open(self).await?;
        let server_persists = if topology.replicated {
            Some(false)
        } else {
            conn.settings.persists()
        };
        let capabilities = Capabilities::new(
            TokenGuarantee::DurableIfServerPersists { server_persists },
            TimeAuthority::Server,
            WakeUp::Poll,
            MAX_TTL,
        )
        .with_kinds(LockKinds::GENERIC.with_shared())
        .with_locks_survive_restart(server_persists == Some(true))
        .with_passes(true);
        Ok(RedisClusterBackend {
            locks: Locks {
                conn,
                wake: Wake::Poll,
                capabilities,
            },
            cluster,
            masters: topology.masters.len(),
            replicated: topology.replicated,
        })
    }

    /// Connects a [`RedisStorage`] on the cluster with this config's fence rule and value
    /// limit, with the checks of [`connect`](Self::connect).
    pub async fn connect_storage(&self) -> Result<RedisStorage> {
        let (conn, _, _) = connect::open(self).await?;
        Ok(RedisStorage::on(conn, self.rule(), self.value_limit()))
    }
}

impl RedisClusterBackend {
    /// Connects to `url` (`redis+cluster://...`) with the default [`RedisClusterConfig`].
    pub async fn connect(url: &str) -> Result<Self> {
        RedisClusterConfig::from_url(url)?.connect().await
    }

    /// A [`RedisStorage`] on the same cluster connection and prefix, with the default rule
    /// and value limit.
    pub fn storage(&self) -> RedisStorage {
        RedisStorage::on(
            self.locks.conn.clone(),
            FenceRule::Monotonic,
            crate::options::DEFAULT_MAX_VALUE_LEN,
        )
    }

    /// A [`RedisFence`] on the driver's cluster connection, with this backend's key prefix
    /// and call timeout. A batch's keys share one slot (the resource's hash tag), so each
    /// batch runs on one master.
    pub fn fence(&self) -> RedisFence<ClusterConnection> {
        self.locks.fence(self.cluster.clone())
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        self.locks.conn.keys.prefix()
    }

    /// How many masters served slots at connect time.
    pub fn masters(&self) -> usize {
        self.masters
    }

    /// The address of every master serving slots now, as one node's `CLUSTER NODES` lists
    /// them (in its order, IPv6 hosts without brackets), leaving out nodes flagged `fail`,
    /// `fail?`, `noaddr` or `handshake`: the same reading as at connect time, asked again, so
    /// it sees failovers and slots moved since. For commands to each master, such as a `SCAN`
    /// routed with `SingleNodeRoutingInfo::ByAddress`.
    ///
    /// One call on the backend's connection, bounded by the call timeout; errors are mapped
    /// as for every call ([`Error::Unavailable`](fencelock_core::Error::Unavailable) when no
    /// node answers in time) and name the seeds, never the password.
    pub async fn master_addresses(&self) -> Result<Vec<HostPort>> {
        let conn = &self.locks.conn;
        connect::masters(&self.cluster, &conn.server, conn.call_timeout).await
    }

    /// Whether any master had a replica at connect time (then a failover may lose grants and
    /// counter increments; see the type's docs).
    pub fn replicated(&self) -> bool {
        self.replicated
    }
}
