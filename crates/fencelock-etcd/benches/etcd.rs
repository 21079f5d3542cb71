//! fencelock's etcd backend and storage against the raw transaction a user writes on the same
//! cluster (put-if-absent + delete), with etcd's own lock service (v3 `Lock` / `Unlock` on a
//! session lease) as the peer, through `fencelock_bench::define_bench!`.
//!
//! `cargo bench -p fencelock-etcd --bench etcd`. The cluster is `FENCELOCK_ETCD_URL` when set,
//! else three members spawned for the run (see `fencelock_testkit::etcd`). Groups are named
//! `etcd-<members>/<scenario>`.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, LockOptions, Txn, TxnOp};
use fencelock_bench::{Baseline, BenchError, FencedSubject, Op, RawTryLock, Subject, Suite, TTL};
use fencelock_core::{LockKey, OwnerId, async_trait};
use fencelock_etcd::EtcdConfig;
use fencelock_testkit::etcd::EtcdServer;

fn raw(what: &str, source: etcd_client::Error) -> BenchError {
    BenchError::raw(what, source)
}

/// What a user writes against etcd without fencelock: a transaction that puts the lock key
/// if it does not exist (`create_revision == 0`), and a delete; plain puts; a serializable
/// get as the cheapest request.
#[derive(Clone)]
struct RawTxnLock {
    client: Client,
    root: String,
}

impl std::fmt::Debug for RawTxnLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawTxnLock").finish_non_exhaustive()
    }
}

#[async_trait]
impl RawTryLock for RawTxnLock {
    const LABEL: &'static str = "raw put-if-absent txn + delete";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool, BenchError> {
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
impl Baseline for RawTxnLock {
    fn round_trip_label(&self) -> String {
        "raw serializable get".into()
    }

    fn write_label(&self) -> String {
        "raw put".into()
    }

    async fn round_trip(&self) -> Result<(), BenchError> {
        let mut kv = self.client.kv_client();
        kv.get(
            format!("{}ping", self.root),
            Some(GetOptions::new().with_serializable()),
        )
        .await
        .map_err(|e| raw("get", e))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>, BenchError> {
        let key = format!("{}data/{resource}", self.root).into_bytes();
        Ok(Box::new(PlainWriter {
            client: self.client.clone(),
            key,
            value: vec![7; 64],
        }))
    }

    async fn close(&self) -> Result<(), BenchError> {
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
    async fn once(&self) -> Result<Option<Duration>, BenchError> {
        let mut kv = self.client.kv_client();
        kv.put(self.key.clone(), self.value.clone(), None)
            .await
            .map_err(|e| raw("put", e))?;
        Ok(None)
    }
}

/// etcd's own lock service, as its clients use it: one session lease kept alive for the run,
/// `Lock(name, lease)` and `Unlock(key)`. `Lock` waits while the lock is held, so waiting is
/// bounded by the wait budget.
#[derive(Clone)]
struct V3LockService {
    client: Client,
    root: String,
    lease: i64,
    keeper: Arc<tokio::task::AbortHandle>,
}

impl std::fmt::Debug for V3LockService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("V3LockService").finish_non_exhaustive()
    }
}

impl V3LockService {
    async fn start(client: Client, root: String) -> Result<Self, BenchError> {
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
        Ok(V3LockService {
            client,
            root,
            lease,
            keeper: Arc::new(task.abort_handle()),
        })
    }

    async fn lock_unlock(&self, key: &LockKey) -> Result<(), BenchError> {
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

impl Drop for V3LockService {
    fn drop(&mut self) {
        if Arc::strong_count(&self.keeper) == 1 {
            self.keeper.abort();
        }
    }
}

#[async_trait]
impl Subject for V3LockService {
    fn label(&self) -> String {
        "etcd v3 Lock + Unlock (session lease)".into()
    }

    async fn acquire_release(&self, key: &LockKey) -> Result<(), BenchError> {
        self.lock_unlock(key).await
    }

    async fn lock_release(&self, key: &LockKey, wait: Duration) -> Result<(), BenchError> {
        tokio::time::timeout(wait, self.lock_unlock(key))
            .await
            .map_err(|_| {
                BenchError::Run(format!("v3 Lock on {key} not obtained within {wait:?}"))
            })?
    }
}

async fn setup() -> Result<(Suite, Option<EtcdServer>), BenchError> {
    let (url, server) = match std::env::var("FENCELOCK_ETCD_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = tokio::task::spawn_blocking(|| EtcdServer::spawn_cluster(3))
                .await
                .map_err(|e| BenchError::Run(format!("spawning etcd: {e}")))?;
            (server.url(), Some(server))
        }
    };
    let run = format!("{:08x}", OwnerId::random().as_u128() as u32);
    let config = EtcdConfig::from_url(&url)?.prefix(format!("bench-{run}"));
    let members = config.hosts().len();
    let cluster = config.connect().await?;
    let fenced = FencedSubject::new(cluster.backend(), Arc::new(cluster.storage()));
    let root = format!("bench-{run}-raw/");
    let baseline = RawTxnLock {
        client: cluster.client().clone(),
        root: root.clone(),
    };
    let peer = V3LockService::start(cluster.client().clone(), root).await?;
    let suite = Suite::new(
        format!("etcd-{members}"),
        fenced,
        Arc::new(baseline),
        vec![Arc::new(peer)],
    );
    // The spawned cluster (if any) lives for the run.
    Ok((suite, server))
}

fencelock_bench::define_bench!(etcd => setup());
