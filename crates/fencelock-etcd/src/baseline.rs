//! What `fencelock bench` measures fencelock's etcd backend against: the raw transaction a
//! user writes on the same cluster (put-if-absent + delete, [`EtcdBaseline`]), etcd's own lock
//! service (v3 `Lock` / `Unlock` on a session lease, [`EtcdLockServicePeer`]), and the sweep
//! of a run's keys ([`EtcdCleanup`]).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, LockOptions, Txn, TxnOp};
use fencelock_core::tools::{Baseline, Cleanup, Op, RawTryLock, Subject, TTL};
use fencelock_core::{Error, LockKey, Result, async_trait};

use crate::cluster::EtcdCluster;
use crate::error::{BACKEND, map_etcd_error};
use crate::keys::{BY_ID, Keys};

fn raw(what: &str, error: etcd_client::Error) -> Error {
    map_etcd_error(BACKEND, error).in_context(what)
}

/// Deletes everything fencelock's backend and storage wrote for a run's keys: locks, token
/// counters, fences, values, readers and queued places (every family of the key layout) under the
/// installation's prefix.
pub struct EtcdCleanup {
    client: Client,
    keys: Keys,
}

impl fmt::Debug for EtcdCleanup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCleanup")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl EtcdCleanup {
    /// On `cluster`'s connection, for the keys under its config's prefix.
    pub fn new(cluster: &EtcdCluster) -> Self {
        EtcdCleanup {
            client: cluster.client().clone(),
            keys: Keys::new(cluster.config().prefix_name()),
        }
    }
}

#[async_trait]
impl Cleanup for EtcdCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        let mut kv = self.client.kv_client();
        for start in self.keys.by_key_under(key_prefix) {
            kv.delete(start, Some(DeleteOptions::new().with_prefix()))
                .await
                .map_err(|e| raw("delete the run's keys", e))?;
        }
        // A reader key or a place lives on its reader's or waiter's lease, so only live ones
        // exist: listing every one of the installation stays small.
        for family in BY_ID {
            let found = kv
                .get(
                    self.keys.all_of(family),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                )
                .await
                .map_err(|e| raw("list the readers and places", e))?;
            for one in found.kvs() {
                let of_run = self
                    .keys
                    .lock_key_of(family, one.key())
                    .is_some_and(|key| key.starts_with(key_prefix.as_bytes()));
                if of_run {
                    kv.delete(one.key(), None)
                        .await
                        .map_err(|e| raw("delete the run's readers and places", e))?;
                }
            }
        }
        Ok(())
    }
}

/// The raw baseline on etcd. What a user writes against etcd without fencelock: a
/// transaction that puts the lock key if it does not exist (`create_revision == 0`), and a
/// delete; plain puts; a serializable get as the cheapest request.
#[derive(Clone)]
pub struct EtcdBaseline {
    client: Client,
    root: String,
}

impl fmt::Debug for EtcdBaseline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBaseline").finish_non_exhaustive()
    }
}

impl EtcdBaseline {
    /// On `client`, with every key it writes under `root` (which it deletes in
    /// [`Baseline::close`]): `<root>lock/<key>`, `<root>data/<resource>`.
    pub fn new(client: Client, root: impl Into<String>) -> Self {
        EtcdBaseline {
            client,
            root: root.into(),
        }
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

/// The peer on etcd. etcd's own lock service, as its clients use it: a session lease kept
/// alive for the run, `Lock(name, lease)` and `Unlock(key)`. `Lock` waits while the lock is
/// held, so waiting is bounded by the wait budget.
///
/// Each call holds a session of its own while it locks, from a pool that grows to the number
/// of calls at once: etcd's lock key is `<name>/<lease>`, so two calls on one session would
/// both "hold" the lock at once (the second finds its key there and returns at once), which
/// would measure no exclusion at all.
#[derive(Clone)]
pub struct EtcdLockServicePeer {
    client: Client,
    root: String,
    sessions: Arc<Sessions>,
}

/// The session leases of a peer: those free now, and all of them, kept alive by one task.
struct Sessions {
    free: Mutex<Vec<i64>>,
    all: Arc<Mutex<Vec<i64>>>,
    keeper: tokio::task::AbortHandle,
}

impl Drop for Sessions {
    fn drop(&mut self) {
        // The last clone ends the keep-alives; the leases then expire on the server.
        self.keeper.abort();
    }
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl fmt::Debug for EtcdLockServicePeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLockServicePeer")
            .finish_non_exhaustive()
    }
}

impl EtcdLockServicePeer {
    /// Starts the task that keeps the session leases ([`TTL`]) on `client` alive until the
    /// last clone is dropped; the locks are named `<root>v3lock/<key>`.
    pub async fn start(client: Client, root: impl Into<String>) -> Result<Self> {
        let all = Arc::new(Mutex::new(Vec::new()));
        let keeper = {
            let (client, all) = (client.clone(), all.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(TTL / 3).await;
                    let ids: Vec<i64> = locked(&all).clone();
                    for id in ids {
                        let mut leases = client.lease_client();
                        if let Ok((mut keeper, mut responses)) = leases.keep_alive(id).await {
                            let _ = keeper.keep_alive().await;
                            let _ = responses.message().await;
                        }
                    }
                }
            })
            .abort_handle()
        };
        Ok(EtcdLockServicePeer {
            client,
            root: root.into(),
            sessions: Arc::new(Sessions {
                free: Mutex::new(Vec::new()),
                all,
                keeper,
            }),
        })
    }

    /// A session lease no other call holds: a free one, or a new one.
    async fn session(&self) -> Result<i64> {
        if let Some(id) = locked(&self.sessions.free).pop() {
            return Ok(id);
        }
        let ttl = i64::try_from(TTL.as_secs()).unwrap_or(30);
        let id = self
            .client
            .lease_client()
            .grant(ttl, None)
            .await
            .map_err(|e| raw("session lease", e))?
            .id();
        locked(&self.sessions.all).push(id);
        Ok(id)
    }

    async fn lock_unlock(&self, key: &LockKey) -> Result<()> {
        /// A session given up unless its call unlocked: no longer kept alive, it expires.
        struct Held<'a>(&'a Sessions, i64, bool);
        impl Drop for Held<'_> {
            fn drop(&mut self) {
                if self.2 {
                    locked(&self.0.free).push(self.1);
                } else {
                    locked(&self.0.all).retain(|&id| id != self.1);
                }
            }
        }
        let lease = self.session().await?;
        let mut session = Held(&self.sessions, lease, false);
        let mut locks = self.client.lock_client();
        let name = format!("{}v3lock/{key}", self.root);
        let held = locks
            .lock(name, Some(LockOptions::new().with_lease(lease)))
            .await
            .map_err(|e| raw("v3 Lock", e))?;
        locks
            .unlock(held.key().to_vec())
            .await
            .map_err(|e| raw("v3 Unlock", e))?;
        // Only a session whose lock was unlocked is free again: one whose call was cut short
        // (its wait budget spent) or failed is dropped.
        session.2 = true;
        Ok(())
    }
}

#[async_trait]
impl Subject for EtcdLockServicePeer {
    fn label(&self) -> String {
        "etcd v3 Lock + Unlock (a session lease per call)".into()
    }

    async fn acquire_release(&self, key: &LockKey) -> Result<()> {
        self.lock_unlock(key).await
    }

    async fn lock_release(&self, key: &LockKey, wait: Duration) -> Result<()> {
        tokio::time::timeout(wait, self.lock_unlock(key))
            .await
            .map_err(|_| Error::Backend {
                backend: "bench",
                message: format!("v3 Lock on {key} not obtained within {wait:?}"),
                source: None,
            })?
    }
}
