//! Redlock decides on a quorum and lets the other nodes' calls finish in the background; a
//! program that exits right after (its runtime dropped) loses those calls unless it waits for
//! them with `finish_background` (which `Locker::shutdown` does). Every node sits behind a
//! proxy that slows every chunk, the third much more than the others (so a call to it is
//! surely sent before the quorum answers), and no node has a script loaded yet, so a release
//! on the third takes three slow round trips after the quorum answered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{LockBackend, LockKey, Locker, OwnerId};
use fencelock_redis::servers::RedisServer;
use fencelock_redis::{RedisConfig, RedlockConfig};
use fencelock_testkit::proxy::FaultProxy;

const TTL: Duration = Duration::from_secs(60);
/// Long enough that three slowed round trips fit with a wide margin.
const NODE_TIMEOUT: Duration = Duration::from_secs(5);
/// Per chunk and direction, the first two nodes: a round trip is 100 ms.
const QUICK: Duration = Duration::from_millis(50);
/// Per chunk and direction, the third node: a round trip is 600 ms.
const SLOW: Duration = Duration::from_millis(300);

struct Nodes {
    servers: Vec<RedisServer>,
    proxies: Arc<[FaultProxy; 3]>,
}

impl Nodes {
    async fn start() -> Self {
        let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::spawn()).collect();
        let mut proxies = Vec::new();
        for server in &servers {
            proxies.push(FaultProxy::start(server.addr()).await.unwrap());
        }
        let proxies: [FaultProxy; 3] = proxies.try_into().unwrap();
        Nodes {
            servers,
            proxies: Arc::new(proxies),
        }
    }

    fn urls(&self) -> Vec<String> {
        self.proxies
            .iter()
            .map(|proxy| format!("redis://127.0.0.1:{}", proxy.port()))
            .collect()
    }

    /// Whether the third node itself has a holder for `key`.
    async fn third_holds(&self, key: &LockKey) -> bool {
        let node = RedisConfig::new(self.servers[2].url())
            .connect()
            .await
            .unwrap();
        node.inspect(key).await.unwrap().holder.is_some()
    }
}

/// Slows the nodes: the third much more than the others.
fn slow_down(proxies: &[FaultProxy; 3]) {
    proxies[0].set_delay(QUICK);
    proxies[1].set_delay(QUICK);
    proxies[2].set_delay(SLOW);
}

fn heal(proxies: &[FaultProxy; 3]) {
    for proxy in proxies {
        proxy.heal();
    }
}

/// Runs `program` as a program of its own: a runtime that is dropped as soon as `program`
/// returns, as a process that exits drops its tasks.
async fn as_a_program<F, Fut>(program: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(program());
    })
    .await
    .unwrap();
}

fn key(name: &str) -> LockKey {
    LockKey::new(format!("background/{name}/{}", OwnerId::random())).unwrap()
}

/// Takes `key` on every node, then releases it with the third node slowed; `wait` says
/// whether the program waits for its background calls before it ends.
async fn release_then_exit(nodes: &Nodes, key: &LockKey, wait: bool) {
    let (urls, proxies, key) = (nodes.urls(), Arc::clone(&nodes.proxies), key.clone());
    as_a_program(move || async move {
        let redlock = RedlockConfig::new(urls)
            .node_timeout(NODE_TIMEOUT)
            .connect()
            .await
            .unwrap();
        let lease = redlock.try_acquire(&key, TTL).await.unwrap().unwrap();
        // The third node's grant, past the quorum, lands too.
        redlock.finish_background().await;
        slow_down(&proxies);
        assert!(redlock.release(&lease).await.unwrap());
        if wait {
            let locker = Locker::new(redlock);
            locker.shutdown().await.unwrap();
        }
    })
    .await;
    heal(&nodes.proxies);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_past_the_quorum_is_finished_before_the_program_ends() {
    let nodes = Nodes::start().await;
    // The control: a program that does not wait leaves the slow node holding the lock, so
    // this setup can tell the two apart.
    let lost = key("release-lost");
    release_then_exit(&nodes, &lost, false).await;
    assert!(
        nodes.third_holds(&lost).await,
        "the control should leave the slow node holding the lock"
    );
    let kept = key("release-waited");
    release_then_exit(&nodes, &kept, true).await;
    assert!(
        !nodes.third_holds(&kept).await,
        "Locker::shutdown returned before the slow node released"
    );
}
