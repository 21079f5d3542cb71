//! `Connection`: one server's connection, shared by a backend or a storage and its clones.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use fencelock_core::Result;
use redis::Client;
use redis::aio::ConnectionManager;
use tracing::Instrument;

use crate::config::RedisConfig;
use crate::error::bounded;
use crate::keys::KeySpace;

/// One server's connection, shared by a backend or a storage and its clones.
#[derive(Clone)]
pub(crate) struct Connection {
    /// The name of the backend using it, for errors and spans.
    pub(crate) backend: &'static str,
    pub(crate) client: Client,
    pub(crate) manager: ConnectionManager,
    pub(crate) keys: KeySpace,
    pub(crate) call_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// The URL with its password as `***`.
    pub(crate) url: String,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("backend", &self.backend)
            .field("url", &self.url)
            .field("prefix", &self.keys.prefix())
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects to the server `config` names, for `backend`, and checks that it answers.
    pub(crate) async fn open(config: &RedisConfig, backend: &'static str) -> Result<Connection> {
        let (client, keys) = config.validate()?;
        let url = config.redacted_url();
        let call_timeout = config.call_limit();
        let connect_timeout = config.connect_limit();
        let manager_config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(call_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(200));
        let span = tracing::debug_span!("connect", backend, url = %url);
        let manager = bounded(
            backend,
            connect_timeout + call_timeout,
            "connect",
            ConnectionManager::new_with_config(client.clone(), manager_config),
        )
        .instrument(span)
        .await?;
        // The manager connects without sending a command; a PING surfaces refused or
        // missing credentials now rather than at the first lock.
        let mut conn = manager.clone();
        let () = bounded(
            backend,
            call_timeout,
            "PING",
            redis::cmd("PING").query_async(&mut conn),
        )
        .await?;
        Ok(Connection {
            backend,
            client,
            manager,
            keys,
            call_timeout,
            connect_timeout,
            url,
        })
    }

    /// Whether the server persists every write before answering (`appendonly yes` with
    /// `appendfsync always`). `None` when the server refuses `CONFIG GET`.
    pub(crate) async fn server_persists(&self) -> Option<bool> {
        let mut conn = self.manager.clone();
        let settings: HashMap<String, String> = bounded(
            self.backend,
            self.call_timeout,
            "CONFIG GET",
            redis::cmd("CONFIG")
                .arg("GET")
                .arg("append*")
                .query_async(&mut conn),
        )
        .await
        .ok()?;
        let appendonly = settings.get("appendonly")?;
        let appendfsync = settings.get("appendfsync")?;
        Some(appendonly == "yes" && appendfsync == "always")
    }

    /// A fresh connection for pub/sub.
    pub(crate) async fn pubsub(&self) -> Result<redis::aio::PubSub> {
        bounded(
            self.backend,
            self.connect_timeout + self.call_timeout,
            "pub/sub connect",
            self.client.get_async_pubsub(),
        )
        .await
    }
}
