//! The conformance suite on a real three-master Redis Cluster, one fresh cluster per property
//! (spawned with `redis-cli --cluster create`); the outage kills every node. The storage
//! properties run a second time against fenced batches on keys of one's own (`RedisFence`
//! over the driver's cluster connection), tokens from the cluster backend.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_conformance::Setup;
use fencelock_core::LockBackend;
use fencelock_redis::RedisClusterConfig;
use fencelock_redis::servers::RedisCluster;

async fn spawn() -> Arc<RedisCluster> {
    tokio::task::spawn_blocking(|| Arc::new(RedisCluster::spawn(3, 0)))
        .await
        .unwrap()
}

async fn setup() -> Setup {
    let cluster = spawn().await;
    let backend = RedisClusterConfig::from_url(&cluster.url())
        .unwrap()
        .call_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect to the spawned cluster");
    assert_eq!(backend.masters(), 3);
    assert_eq!(backend.name(), "redis-cluster");
    let storage = backend.storage();
    let killed = Arc::clone(&cluster);
    Setup::new(
        Arc::new(backend),
        Arc::new(storage),
        Box::new(move || {
            let cluster = Arc::clone(&killed);
            Box::pin(async move {
                tokio::task::spawn_blocking(move || cluster.kill_all())
                    .await
                    .unwrap()
            })
        }),
    )
    .keep(cluster)
}

fencelock_conformance::conformance_suite!(setup());

/// A resource's value in the user key `value:{<resource>}`, every operation one fenced batch
/// through `RedisFence` on the cluster.
mod fence_storage {
    use std::sync::Arc;

    use async_trait::async_trait;
    use fencelock_conformance::Setup;
    use fencelock_core::{Fence, FencedStorage, LockKey, Result, Snapshot};
    use fencelock_redis::{RedisClusterBackend, RedisClusterConfig, Reply, hash_tag};

    const MAX_VALUE_LEN: usize = 2 << 20;

    #[derive(Debug, Clone)]
    struct UserKeyStorage {
        backend: RedisClusterBackend,
    }

    fn value_key(resource: &LockKey) -> String {
        format!("value:{}", hash_tag(resource))
    }

    #[async_trait]
    impl FencedStorage for UserKeyStorage {
        fn name(&self) -> &'static str {
            "redis-cluster-fence"
        }

        fn max_value_len(&self) -> usize {
            MAX_VALUE_LEN
        }

        async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
            let replies = self
                .backend
                .fence()
                .max_value_len(MAX_VALUE_LEN)
                .get(value_key(resource))
                .commit(resource, fence)
                .await?;
            match replies.as_slice() {
                [Reply::Value(value)] => Ok(value.clone()),
                other => panic!("a GET answered {other:?}"),
            }
        }

        async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
            self.backend
                .fence()
                .max_value_len(MAX_VALUE_LEN)
                .set(value_key(resource), value)
                .commit(resource, fence)
                .await
                .map(drop)
        }

        async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
            let (fence, replies) = self
                .backend
                .fence()
                .get(value_key(resource))
                .peek(resource)
                .await?;
            let value = match replies.as_slice() {
                [Reply::Value(value)] => value.clone(),
                other => panic!("a GET answered {other:?}"),
            };
            Ok(fence.map(|fence| Snapshot { value, fence }))
        }
    }

    async fn setup() -> Setup {
        let cluster = super::spawn().await;
        let backend = RedisClusterConfig::from_url(&cluster.url())
            .unwrap()
            .connect()
            .await
            .expect("connect to the spawned cluster");
        let storage = UserKeyStorage {
            backend: backend.clone(),
        };
        Setup::for_storage(Arc::new(backend), Arc::new(storage)).keep(cluster)
    }

    fencelock_conformance::storage_suite!(setup());
}
