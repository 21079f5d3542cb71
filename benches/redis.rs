//! The Redis backends next to raw `SET NX PX` + `DEL`, plain `SET` and `PING` on the same
//! spawned `redis-server`s, every scenario of `fencelock-bench` in one run: one node, Redlock
//! on 3 and 5 nodes (with fencelock's one-node backend on the first node as a peer), and
//! Redlock on 5 nodes with one of them behind a proxy adding 50 ms each way.
//! `benches/redlock.rs` compares Redlock with the `rslock` crate.

use std::time::Duration;

use fencelock::HostPort;
use fencelock::redis::{RedisConfig, RedlockConfig};
use fencelock_bench::{BenchError, Suite};
use fencelock_redis::servers::RedisServer;
use fencelock_testkit::proxy::FaultProxy;

async fn redlock(
    nodes: usize,
    slowed: Option<Duration>,
) -> fencelock_bench::Result<(Suite, (Vec<RedisServer>, Option<FaultProxy>))> {
    let servers: Vec<RedisServer> = (0..nodes).map(|_| RedisServer::spawn()).collect();
    let mut config = RedlockConfig::new(servers.iter().map(RedisServer::url));
    let mut proxy = None;
    if let Some(delay) = slowed {
        let last = servers
            .last()
            .ok_or_else(|| BenchError::Run("no node".into()))?;
        let slow = FaultProxy::start(last.addr())
            .await
            .map_err(|e| BenchError::Run(format!("proxy: {e}")))?;
        slow.set_delay(delay);
        let mut hosts = config.hosts();
        if let Some(host) = hosts.last_mut() {
            *host = HostPort::new("127.0.0.1", slow.port());
        }
        config = config.with_hosts(&hosts)?;
        proxy = Some(slow);
    }
    let mut suite = Suite::connect(&config).await?;
    if proxy.is_some() {
        suite.backend = format!("{}-one-slowed", suite.backend);
    }
    Ok((suite, (servers, proxy)))
}

fencelock_bench::define_bench!(
    redis => async {
        let server = RedisServer::spawn();
        let suite = Suite::connect(&RedisConfig::from_url(&server.url())?).await?;
        Ok((suite, server))
    },
    redlock_3 => redlock(3, None),
    redlock_5 => redlock(5, None),
    redlock_5_one_slowed_50ms => redlock(5, Some(Duration::from_millis(50))),
);
