//! The `rslock` crate's Redlock as a peer of the Redis bench kits: what a user of that
//! library gets from the same servers, measured in the same run as the raw baseline and
//! fencelock.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::tools::{Subject, TTL, held_by_someone_else};
use fencelock_core::{Error, LockKey, Result};
use redis::AsyncConnectionConfig;
use rslock::{LockError, LockManager};
use tokio::time::Instant;

use crate::config::RedisConfig;
use crate::connection::ensure_crypto_provider;
use crate::error::map_error;
use crate::redis_url::Endpoint;

/// The name this peer's errors carry.
const RSLOCK: &str = "rslock";

/// A key no run uses (run keys go on with `/<run id>/`), read once on every server to open
/// rslock's connections before anything is measured.
const WARM_UP_KEY: &[u8] = b"fencelock-bench";

/// rslock's `LockManager` on one Redis server or on Redlock's N, as its users call it.
///
/// - acquire+release is one `LockManager::lock` with a single try (quorum of `SET NX PX`,
///   then the unlock script on every server); a lock found held is an error, as for every
///   subject.
/// - the contended scenarios wait the way rslock waits: `lock` with rslock's default retries
///   (3 tries, a random pause of up to 200 ms between them), called again until granted,
///   which is what its `acquire` does, with `wait` checked between calls.
///
/// rslock swallows what each server says (a refused connection counts as a lock not
/// taken), so when a lock is not taken every server is asked for a `PING` on a connection
/// of its own, and a server that does not answer is the error, named by `host:port` (never
/// with its password). Its keys are the run's keys as given, deleted as they are released
/// (or expiring after [`TTL`] if a run stopped half way). rslock's unlock says nothing of how
/// it went: a key it failed to delete shows as held on the next try.
///
/// # Cancel safety
///
/// Dropping an operation after a server's `SET` and before the unlock leaves that key held
/// until [`TTL`] runs out, as it would for rslock's own users.
#[derive(Clone)]
pub struct RslockPeer {
    /// One try per `lock`.
    once: LockManager,
    /// rslock's default retries; the same connections as `once`.
    waiting: LockManager,
    servers: Vec<Server>,
    label: String,
}

/// One server, for the checks after a failure.
#[derive(Clone)]
struct Server {
    config: RedisConfig,
    client: redis::Client,
}

impl fmt::Debug for RslockPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<String> = self.servers.iter().map(Server::name).collect();
        f.debug_struct("RslockPeer")
            .field("label", &self.label)
            .field("servers", &servers)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// `host:port`, no credentials.
    fn name(&self) -> String {
        self.config.server_label()
    }

    /// A `PING` on a fresh connection, within the config's connect and call timeouts.
    async fn ping(&self) -> Result<()> {
        let timeouts = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.connect_limit()))
            .set_response_timeout(Some(self.config.call_limit()));
        let context = format!("rslock server {}", self.name());
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&timeouts)
            .await
            .map_err(|e| map_error(RSLOCK, e).in_context(&context))?;
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| map_error(RSLOCK, e).in_context(&context))?;
        Ok(())
    }
}

impl RslockPeer {
    /// rslock over `servers` (one for a Redis server, N for Redlock), reached as their
    /// configs say (credentials, database, TLS with its `tls_ca`). Nothing but the URLs is
    /// checked here: a server that does not answer fails the operations that need it.
    pub async fn connect(servers: &[RedisConfig]) -> Result<Self> {
        if servers.is_empty() {
            return Err(Error::config("rslock needs at least one Redis server"));
        }
        let mut checked = Vec::with_capacity(servers.len());
        for config in servers {
            if config.endpoint().is_some_and(Endpoint::is_tls) {
                ensure_crypto_provider();
            }
            let (client, _) = config.validate()?;
            checked.push(Server {
                config: config.clone(),
                client,
            });
        }
        let waiting = LockManager::from_clients(checked.iter().map(|s| s.client.clone()).collect());
        let mut once = waiting.clone();
        // A single try: the pause is never taken.
        once.set_retry(1, Duration::from_millis(1));
        // rslock connects on first use; reading a key of nobody's opens its connections now,
        // as the baseline's are open before the run. A server that fails here is found again,
        // and named, by the operations.
        let _ = waiting.query_redis_for_key_value(WARM_UP_KEY).await;
        let label = match servers.len() {
            1 => "rslock lock + unlock".to_owned(),
            n => format!("rslock lock + unlock ({n} nodes)"),
        };
        Ok(RslockPeer {
            once,
            waiting,
            servers: checked,
            label,
        })
    }

    /// Why a lock was not taken when rslock only says it was not: the first server that does
    /// not answer a `PING`, or `otherwise` when all answer (the lock was held).
    async fn not_taken(&self, otherwise: Error) -> Error {
        for server in &self.servers {
            if let Err(e) = server.ping().await {
                return e;
            }
        }
        otherwise
    }

    /// rslock's other errors, naming the servers.
    fn map_lock_error(&self, e: LockError) -> Error {
        let servers: Vec<String> = self.servers.iter().map(Server::name).collect();
        let context = format!("rslock on {}", servers.join(","));
        match e {
            LockError::Redis(e) => map_error(RSLOCK, e).in_context(&context),
            LockError::TtlTooLarge => Error::config(format!("{context}: the ttl is too large")),
            other => Error::Backend {
                backend: RSLOCK,
                message: format!("{context}: {other}"),
                source: Some(Box::new(other)),
            },
        }
    }
}

#[async_trait]
impl Subject for RslockPeer {
    fn label(&self) -> String {
        self.label.clone()
    }

    async fn acquire_release(&self, key: &LockKey) -> Result<()> {
        match self.once.lock(key.as_str(), TTL).await {
            Ok(lock) => {
                lock.release().await;
                Ok(())
            }
            Err(LockError::Unavailable) => {
                Err(self.not_taken(held_by_someone_else(&self.label, key)).await)
            }
            Err(e) => Err(self.map_lock_error(e)),
        }
    }

    /// Not rslock's `acquire` under a timeout: cancelling it between a server's `SET` and
    /// its return would leave the key held for the whole [`TTL`]. Its loop instead, with the
    /// deadline checked between its calls to `lock`, so the wait can run over by one `lock`
    /// (at most three tries and two pauses of up to 200 ms).
    async fn lock_release(&self, key: &LockKey, wait: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            match self.waiting.lock(key.as_str(), TTL).await {
                Ok(lock) => {
                    lock.release().await;
                    return Ok(());
                }
                Err(LockError::Unavailable) if start.elapsed() < wait => {}
                Err(LockError::Unavailable) => {
                    let timeout = Error::Timeout {
                        key: key.to_string(),
                        waited: start.elapsed(),
                    };
                    return Err(self.not_taken(timeout).await);
                }
                Err(e) => return Err(self.map_lock_error(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A key of this test run's own on the shared server.
    fn key(name: &str) -> LockKey {
        LockKey::new(format!(
            "fencelock-test/rslock-peer/{}/{name}",
            fencelock_core::OwnerId::random()
        ))
        .unwrap()
    }

    async fn exists(key: &LockKey) -> bool {
        let client = redis::Client::open("redis://127.0.0.1:6379").unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let n: i64 = redis::cmd("EXISTS")
            .arg(key.as_str())
            .query_async(&mut conn)
            .await
            .unwrap();
        n == 1
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rslock_takes_and_releases_on_the_shared_server() {
        let server = RedisConfig::from_url("redis://127.0.0.1:6379").unwrap();
        let peer = RslockPeer::connect(&[server]).await.unwrap();
        assert_eq!(peer.label(), "rslock lock + unlock");
        let key = key("a");
        peer.acquire_release(&key).await.unwrap();
        assert!(!exists(&key).await, "released");
        peer.lock_release(&key, Duration::from_secs(1))
            .await
            .unwrap();
        assert!(!exists(&key).await, "released");

        // Held by another rslock user: refused at once, waited for until it is released.
        let holder = peer.once.lock(key.as_str(), TTL).await.unwrap();
        let err = peer.acquire_release(&key).await.unwrap_err();
        assert!(err.to_string().contains("held by someone else"), "{err}");
        let err = peer
            .lock_release(&key, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        let waiter = {
            let peer = peer.clone();
            let key = key.clone();
            tokio::spawn(async move { peer.lock_release(&key, Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        holder.release().await;
        waiter.await.unwrap().unwrap();
        assert!(!exists(&key).await, "released");
    }

    #[tokio::test]
    async fn a_server_that_does_not_answer_is_named_without_its_password() {
        // Port 1 on loopback: nothing listens there.
        let server = RedisConfig::from_url("redis://:s3cr3t@127.0.0.1:1").unwrap();
        let peer = RslockPeer::connect(&[server]).await.unwrap();
        assert_eq!(
            format!("{peer:?}"),
            r#"RslockPeer { label: "rslock lock + unlock", servers: ["127.0.0.1:1"], .. }"#
        );
        let key = key("down");
        let err = peer.acquire_release(&key).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Unavailable {
                    backend: "rslock",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
        let err = peer
            .lock_release(&key, Duration::from_millis(10))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Unavailable { .. }), "{err}");
        for shown in [err.to_string(), format!("{err:?}"), format!("{peer:?}")] {
            assert!(!shown.contains("s3cr3t"), "{shown}");
        }
    }

    #[tokio::test]
    async fn no_server_is_a_config_error() {
        let err = RslockPeer::connect(&[]).await.unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    }
}
