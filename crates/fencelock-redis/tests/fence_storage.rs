//! The storage properties of the conformance suite, run against fenced writes to keys of
//! one's own: a `FencedStorage` adapter that keeps each resource's value in a user key and
//! fences it with `RedisFence` on the user's own connection. Tokens come from the Redis lock
//! backend on the same spawned server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use fencelock_conformance::Setup;
use fencelock_core::{Fence, FencedStorage, LockKey, Result, Snapshot};
use fencelock_redis::redis::aio::MultiplexedConnection;
use fencelock_redis::servers::RedisServer;
use fencelock_redis::{RedisConfig, RedisFence, Reply, hash_tag, redis};

/// The largest value the adapter accepts.
const MAX_VALUE_LEN: usize = 2 << 20;

/// A resource's value in the user key `value:{<resource>}`, every operation one fenced batch.
#[derive(Clone)]
struct UserKeyStorage {
    conn: MultiplexedConnection,
}

impl std::fmt::Debug for UserKeyStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserKeyStorage").finish_non_exhaustive()
    }
}

impl UserKeyStorage {
    fn fence(&self) -> RedisFence<MultiplexedConnection> {
        RedisFence::new(self.conn.clone()).max_value_len(MAX_VALUE_LEN)
    }
}

fn value_key(resource: &LockKey) -> String {
    format!("value:{}", hash_tag(resource))
}

#[async_trait]
impl FencedStorage for UserKeyStorage {
    fn name(&self) -> &'static str {
        "redis-fence"
    }

    fn max_value_len(&self) -> usize {
        MAX_VALUE_LEN
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        let replies = self
            .fence()
            .get(value_key(resource))
            .commit(resource, fence)
            .await?;
        match replies.as_slice() {
            [Reply::Value(value)] => Ok(value.clone()),
            other => panic!("a GET answered {other:?}"),
        }
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        self.fence()
            .set(value_key(resource), value)
            .commit(resource, fence)
            .await
            .map(drop)
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        let (fence, replies) = self.fence().get(value_key(resource)).peek(resource).await?;
        let value = match replies.as_slice() {
            [Reply::Value(value)] => value.clone(),
            other => panic!("a GET answered {other:?}"),
        };
        Ok(fence.map(|fence| Snapshot { value, fence }))
    }
}

async fn setup() -> Setup {
    let server = Arc::new(RedisServer::spawn());
    let backend = RedisConfig::new(server.url())
        .connect()
        .await
        .expect("connect to the spawned redis-server");
    let conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("a connection of the application's own");
    Setup::for_storage(Arc::new(backend), Arc::new(UserKeyStorage { conn })).keep(server)
}

fencelock_conformance::storage_suite!(setup());
