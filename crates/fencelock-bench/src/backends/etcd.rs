//! etcd: fencelock's backend against the raw transaction a user writes on the same cluster
//! (put-if-absent + delete), with etcd's own lock service (v3 `Lock` / `Unlock` on a session
//! lease) as the peer.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, LockOptions, Txn, TxnOp};
use fencelock_core::LockKey;
use fencelock_etcd::EtcdConfig;

use crate::error::{BenchError, Result};
use crate::fenced_subject::FencedSubject;
use crate::subject::{Baseline, Cleanup, Op, RawTryLock, Subject, TTL};
use crate::suite::Suite;

impl Suite {
    /// The etcd cluster `config` names, with fencelock's keys under its prefix
    /// ([`EtcdConfig::prefix_name`]), against raw transactions on the same connection under
    /// `<prefix>-raw/<run id>/`, and etcd's v3 lock service. Named `etcd-<members>` in reports.
    pub async fn etcd(config: &EtcdConfig) -> Result<Self> {
        let members = config.hosts().len();
        let cluster = config.connect().await?;
        let fenced = FencedSubject::new(cluster.backend(), Arc::new(cluster.storage()));
        let run = format!("{:016x}", rand::random::<u64>());
        let root = format!("{}-raw/{run}/", config.prefix_name());
        let baseline = EtcdBaseline {
            client: cluster.client().clone(),
            root: root.clone(),
        };
        let peer = EtcdLockServicePeer::start(cluster.client().clone(), root).await?;
        let cleanup = EtcdCleanup {
            client: cluster.client().clone(),
            prefix: config.prefix_name().to_owned(),
        };
        Ok(Suite::new(
            format!("etcd-{members}"),
            fenced,
            Arc::new(baseline),
            vec![Arc::new(peer)],
        )
        .with_cleanup(Arc::new(cleanup)))
    }
}

fn raw(what: &str, source: etcd_client::Error) -> BenchError {
    BenchError::raw(what, source)
}

/// Deletes fencelock's keys of a run: every family (`lock`, `token`, `fence`, `data`) under
/// the run's key prefix.
struct EtcdCleanup {
    client: Client,
    prefix: String,
}

impl std::fmt::Debug for EtcdCleanup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCleanup")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Cleanup for EtcdCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        let mut kv = self.client.kv_client();
        for family in ["lock", "token", "fence", "data"] {
            kv.delete(
                format!("{}/{family}/{key_prefix}", self.prefix),
                Some(DeleteOptions::new().with_prefix()),
            )
            .await
            .map_err(|e| raw("delete the run's keys", e))?;
        }
        Ok(())
    }
}

/// The raw baseline on etcd. What a user writes against etcd without fencelock: a transaction that puts the lock key
/// if it does not exist (`create_revision == 0`), and a delete; plain puts; a serializable
/// get as the cheapest request.
#[derive(Clone)]
pub struct EtcdBaseline {
    client: Client,
    root: String,
}

impl std::fmt::Debug for EtcdBaseline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBaseline").finish_non_exhaustive()
    }
}

#[async_trait]
impl RawTryLock for EtcdBaseline {
    const LABEL: &'static str = "raw put-if-absent txn + delete";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        let name = format!("{}lock/{key}", self.root).into_bytes();
        let mut kv = self.client.kv_client();
        let txn = Txn::new()
            .when([Compare::create_revision(name.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(name.clone(), "owner", None)]);
        if !kv
            .txn(txn)
            .await
            .map_err(|e| raw("put-if-absent txn", e))?
            .succeeded()
        {
            return Ok(false);
        }
        kv.delete(name, None).await.map_err(|e| raw("delete", e))?;
        Ok(true)
    }
}

#[async_trait]
impl Baseline for EtcdBaseline {
    fn round_trip_label(&self) -> String {
        "raw serializable get".into()
    }

    fn write_label(&self) -> String {
        "raw put".into()
    }

    async fn round_trip(&self) -> Result<()> {
        let mut kv = self.client.kv_client();
        kv.get(
            format!("{}ping", self.root),
            Some(GetOptions::new().with_serializable()),
        )
        .await
        .map_err(|e| raw("get", e))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        let key = format!("{}data/{resource}", self.root).into_bytes();
        Ok(Box::new(PlainWriter {
            client: self.client.clone(),
            key,
            value: vec![7; 64],
        }))
    }

    async fn close(&self) -> Result<()> {
        let mut kv = self.client.kv_client();
        kv.delete(self.root.clone(), Some(DeleteOptions::new().with_prefix()))
            .await
            .map_err(|e| raw("delete the baseline's keys", e))?;
        Ok(())
    }
}

struct PlainWriter {
    client: Client,
    key: Vec<u8>,
    value: Vec<u8>,
}

#[async_trait]
impl Op for PlainWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        let mut kv = self.client.kv_client();
        kv.put(self.key.clone(), self.value.clone(), None)
            .await
            .map_err(|e| raw("put", e))?;
        Ok(None)
    }
}

/// The peer on etcd. etcd's own lock service, as its clients use it: one session lease kept alive for the run,
/// `Lock(name, lease)` and `Unlock(key)`. `Lock` waits while the lock is held, so waiting is
/// bounded by the wait budget.
#[derive(Clone)]
pub struct EtcdLockServicePeer {
    client: Client,
    root: String,
    lease: i64,
    keeper: Arc<tokio::task::AbortHandle>,
}

impl std::fmt::Debug for EtcdLockServicePeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLockServicePeer")
            .finish_non_exhaustive()
    }
}

impl EtcdLockServicePeer {
    async fn start(client: Client, root: String) -> Result<Self> {
        let mut leases = client.lease_client();
        let ttl = i64::try_from(TTL.as_secs()).unwrap_or(30);
        let lease = leases
            .grant(ttl, None)
            .await
            .map_err(|e| raw("session lease", e))?
            .id();
        let (mut keeper, mut responses) = leases
            .keep_alive(lease)
            .await
            .map_err(|e| raw("session keep-alive", e))?;
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(TTL / 3).await;
                if keeper.keep_alive().await.is_err() || responses.message().await.is_err() {
                    return;
                }
            }
        });
        Ok(EtcdLockServicePeer {
            client,
            root,
            lease,
            keeper: Arc::new(task.abort_handle()),
        })
    }

    async fn lock_unlock(&self, key: &LockKey) -> Result<()> {
        let mut locks = self.client.lock_client();
        let name = format!("{}v3lock/{key}", self.root);
        let held = locks
            .lock(name, Some(LockOptions::new().with_lease(self.lease)))
            .await
            .map_err(|e| raw("v3 Lock", e))?;
        locks
            .unlock(held.key().to_vec())
            .await
            .map_err(|e| raw("v3 Unlock", e))?;
        Ok(())
    }
}

impl Drop for EtcdLockServicePeer {
    fn drop(&mut self) {
        if Arc::strong_count(&self.keeper) == 1 {
            self.keeper.abort();
        }
    }
}

#[async_trait]
impl Subject for EtcdLockServicePeer {
    fn label(&self) -> String {
        "etcd v3 Lock + Unlock (session lease)".into()
    }

    async fn acquire_release(&self, key: &LockKey) -> Result<()> {
        self.lock_unlock(key).await
    }

    async fn lock_release(&self, key: &LockKey, wait: Duration) -> Result<()> {
        tokio::time::timeout(wait, self.lock_unlock(key))
            .await
            .map_err(|_| {
                BenchError::Run(format!("v3 Lock on {key} not obtained within {wait:?}"))
            })?
    }
}
