//! The Redis backend (one node) next to raw `SET NX PX` + `DEL`, plain `SET` and `PING` on
//! the same spawned `redis-server`, every scenario of `fencelock-bench` in one run.

use fencelock_bench::Suite;
use fencelock_testkit::redis::RedisServer;

fencelock_bench::define_bench!(redis => async {
    let server = RedisServer::spawn();
    let suite = Suite::redis(&server.url()).await?;
    Ok((suite, server))
});
