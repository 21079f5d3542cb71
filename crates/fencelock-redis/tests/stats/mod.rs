//! What a Redis server counts of the commands it ran (`INFO commandstats`), for the tests that
//! count requests: one parser for all of them.
#![allow(dead_code, clippy::unwrap_used)]

use fencelock_redis::servers::RedisServer;
use redis::aio::MultiplexedConnection;

/// A connection of its own to `server`, for `INFO` and `PUBSUB`.
pub(crate) async fn admin(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The calls of `commands` (lowercase, as `INFO` names them) the server ran since its stats
/// were last reset.
pub(crate) async fn calls(admin: &mut MultiplexedConnection, commands: &[&str]) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            if !commands.contains(&name) {
                return None;
            }
            let calls = stats.split("calls=").nth(1)?;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// The scripts the server ran: `EVALSHA`, and `EVAL` after a `NOSCRIPT`.
pub(crate) async fn script_calls(admin: &mut MultiplexedConnection) -> u64 {
    calls(admin, &["evalsha", "eval"]).await
}
