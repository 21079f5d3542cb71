//! `EtcdCluster`: a connected client, shared by the lock backend and the storage.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetResponse, Txn, TxnResponse};
use fencelock_core::{Error, FenceRule, LockBackend, Result};

use crate::backend::EtcdLockBackend;
use crate::config::EtcdConfig;
use crate::error::{BACKEND, mapped};
use crate::keys::Keys;
use crate::storage::EtcdStorage;

/// HTTP/2 pings on busy connections, so a member that vanished without closing its
/// connections (a partition, a frozen process) is noticed. etcd answers pings sent more often
/// than every 5 s (its `--grpc-keepalive-min-time`) or on idle connections with GOAWAY, so
/// pings go every 10 s and only while requests are open.
const PING_INTERVAL: Duration = Duration::from_secs(10);
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// What the backend and the storage of one connection share.
pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    /// `host:port,...`: how errors name the cluster.
    pub(crate) members: String,
    pub(crate) operation_timeout: Duration,
    /// The shortest lease the cluster grants, in seconds (etcd raises shorter ones to it).
    pub(crate) min_lease_secs: i64,
    pub(crate) max_value_len: usize,
    /// Tries of a request that found no connection.
    pub(crate) retries: u32,
    /// The config, shown redacted by `Debug`.
    pub(crate) config: EtcdConfig,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCluster")
            .field("config", &self.config)
            .field("min_lease_secs", &self.min_lease_secs)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Runs a request under the operation time-out, mapping its error (naming `what` and
    /// this cluster). `request` makes the request; it is made again when a member refused
    /// the connection, see [`call_raw`](Self::call_raw).
    pub(crate) async fn call<T, F, Fut>(&self, what: &str, request: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        self.call_raw(what, request)
            .await?
            .map_err(|e| self.error(e, what))
    }

    /// [`call`](Self::call), handing etcd's own errors back unmapped (for callers that look
    /// at them, such as a lease that is gone); only the time-out is an [`Error`].
    ///
    /// The client spreads requests over the members and keeps trying a member that is down
    /// (it reconnects lazily): a request that found no connection (the member refused it) was
    /// never sent, so it is sent again, and the next try may go to another member. That is
    /// what keeps locks working while a minority of members is down.
    pub(crate) async fn call_raw<T, F, Fut>(
        &self,
        what: &str,
        mut request: F,
    ) -> Result<std::result::Result<T, etcd_client::Error>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let attempts = async {
            let mut tries = 0;
            loop {
                match request().await {
                    Err(e) if never_sent(&e) && tries < self.retries => {
                        tries += 1;
                        // A short pause, so that a cluster that is entirely down fails fast
                        // but not in a hot loop.
                        tokio::time::sleep(Duration::from_millis(5 * u64::from(tries))).await;
                    }
                    outcome => return outcome,
                }
            }
        };
        crate::error::within(self.operation_timeout, what, &self.members, attempts).await
    }

    /// Maps an etcd error naming `what` and this cluster.
    pub(crate) fn error(&self, error: etcd_client::Error, what: &str) -> Error {
        mapped(error, what, &self.members)
    }

    /// One transaction.
    pub(crate) async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse> {
        self.call_raw_txn(what, txn)
            .await?
            .map_err(|e| self.error(e, what))
    }

    /// One transaction, etcd's error unmapped.
    pub(crate) async fn call_raw_txn(
        &self,
        what: &str,
        txn: Txn,
    ) -> Result<std::result::Result<TxnResponse, etcd_client::Error>> {
        self.call_raw(what, || {
            let mut kv = self.client.kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
    }

    /// Reads one key (linearizable).
    pub(crate) async fn get(&self, what: &str, key: &[u8]) -> Result<GetResponse> {
        self.call(what, || {
            let mut kv = self.client.kv_client();
            let key = key.to_vec();
            async move { kv.get(key, None).await }
        })
        .await
    }
}

/// Whether `error` says the request found no connection to send it on (the member refused
/// the connection, or this client refused the member's TLS certificate, which it checks
/// before it sends anything), so it certainly had no effect.
pub(crate) fn never_sent(error: &etcd_client::Error) -> bool {
    crate::tls::handshake_failure(error).is_some_and(|failure| failure.certificate)
        || crate::error::causes(error).any(|cause| {
            cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        })
}

/// A connection to an etcd cluster: the source of [`EtcdLockBackend`] and [`EtcdStorage`],
/// which share it. Cheap to clone.
///
/// [`EtcdConfig::connect`] makes one: it connects (authenticating when the URL carries
/// credentials) and grants and revokes a one-second lease, which both proves that a quorum
/// answers and measures the shortest lease the cluster grants (etcd raises shorter ones to
/// 1.5 election timeouts, rounded up to whole seconds: 2 s with etcd's defaults).
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use fencelock_core::Locker;
/// use fencelock_etcd::EtcdConfig;
/// let cluster = EtcdConfig::from_url("etcd://10.0.0.1,10.0.0.2,10.0.0.3")?.connect().await?;
/// let locker = Locker::new(cluster.lock_backend());
/// let storage = cluster.storage();
/// let guard = locker.lock("invoices").await?;
/// let key = guard.lease().key;
/// fencelock_core::FencedStorage::write(&storage, &key, guard.fence(), b"paid").await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdCluster {
    shared: Arc<Shared>,
}

impl fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.fmt(f)
    }
}

impl EtcdCluster {
    pub(crate) async fn connect(config: &EtcdConfig) -> Result<Self> {
        let members = config.members_label();
        let mut options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_keep_alive(PING_INTERVAL, PING_TIMEOUT)
            .with_keep_alive_while_idle(false)
            // A member without a leader refuses at once ("no leader") instead of holding
            // the request until the time-out.
            .with_require_leader(true);
        if let Some((user, password)) = config.credentials() {
            options = options
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        #[cfg(feature = "tls")]
        if let Some(files) = &config.tls {
            options = options.with_tls(crate::tls::client_options(files)?);
        }
        let label = members.clone();
        let refused = move |e| crate::tls::explained_at_connect(e, config, &label);
        let connect = Client::connect(config.endpoints(), Some(options));
        let client = match tokio::time::timeout(config.connect_timeout, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(refused(mapped(e, "connect", &members))),
            Err(_) => {
                return Err(Error::Unavailable {
                    backend: BACKEND,
                    message: format!(
                        "connect: no answer from {members} within {:?}",
                        config.connect_timeout
                    ),
                    source: None,
                });
            }
        };
        let mut shared = Shared {
            client,
            keys: Keys::new(config.prefix_name()),
            members,
            operation_timeout: config.operation_timeout.min(config.connect_timeout),
            min_lease_secs: 1,
            max_value_len: config.max_value_len,
            retries: u32::try_from(config.hosts().len() * 3).unwrap_or(u32::MAX),
            config: config.clone(),
        };
        shared.min_lease_secs = probe_min_lease(&shared).await.map_err(refused)?;
        shared.operation_timeout = config.operation_timeout;
        Ok(EtcdCluster {
            shared: Arc::new(shared),
        })
    }

    /// The lock backend on this cluster.
    pub fn lock_backend(&self) -> EtcdLockBackend {
        EtcdLockBackend::new(self.shared.clone())
    }

    /// [`lock_backend`](Self::lock_backend) as an `Arc<dyn LockBackend>`.
    pub fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(self.lock_backend())
    }

    /// The fenced storage on this cluster, with the default rule
    /// ([`FenceRule::Monotonic`]).
    pub fn storage(&self) -> EtcdStorage {
        EtcdStorage::new(self.shared.clone(), FenceRule::default())
    }

    /// The shortest lease the cluster grants, as measured by [`EtcdConfig::connect`]; it is
    /// the backend's [`Capabilities::min_ttl`](fencelock_core::Capabilities::min_ttl).
    pub fn min_lease(&self) -> Duration {
        Duration::from_secs(self.shared.min_lease_secs.unsigned_abs())
    }

    /// The config this cluster was connected with.
    pub fn config(&self) -> &EtcdConfig {
        &self.shared.config
    }

    /// The `etcd-client` handle, for the application's own requests on the same connection.
    pub fn client(&self) -> &Client {
        &self.shared.client
    }
}

/// Grants a one-second lease and revokes it: the granted ttl is the cluster's minimum.
async fn probe_min_lease(shared: &Shared) -> Result<i64> {
    let granted = shared
        .call("connect (granting a probe lease)", || {
            let mut lease = shared.client.lease_client();
            async move { lease.grant(1, None).await }
        })
        .await?;
    let (id, ttl) = (granted.id(), granted.ttl());
    // The probe lease holds no key; if the revoke is lost it expires on its own.
    let _ = shared
        .call("connect (revoking the probe lease)", || {
            let mut lease = shared.client.lease_client();
            async move { lease.revoke(id).await }
        })
        .await;
    Ok(ttl.max(1))
}
