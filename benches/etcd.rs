//! fencelock's etcd backend and storage next to the raw transaction a user writes on the same
//! cluster (put-if-absent + delete), with etcd's own lock service (v3 `Lock` / `Unlock`, a
//! session lease per call) as the peer, from the etcd crate's own bench kit.
//!
//! `cargo bench --features etcd,servers --bench etcd`. The cluster is `FENCELOCK_ETCD_URL` when set,
//! else three members spawned for the run (see `fencelock::etcd::servers`). Groups are named
//! `etcd-<members>/<scenario>`.

use fencelock::OwnerId;
use fencelock::etcd::EtcdConfig;
use fencelock::etcd::servers::{Etcd, EtcdMembers};
use fencelock_bench::{BenchError, Suite};
use fencelock_testkit::members::Spawned;

async fn setup() -> Result<(Suite, Option<Spawned<Etcd>>), BenchError> {
    let (url, server) = match std::env::var("FENCELOCK_ETCD_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = tokio::task::spawn_blocking(|| Spawned::spawn_with(Etcd, 3))
                .await
                .map_err(|e| BenchError::Run(format!("spawning etcd: {e}")))?;
            (server.url(), Some(server))
        }
    };
    let run = format!("{:08x}", OwnerId::random().as_u128() as u32);
    let config = EtcdConfig::from_url(&url)?.prefix(format!("bench-{run}"));
    let suite = Suite::connect(&config).await?;
    // The spawned cluster (if any) lives for the run.
    Ok((suite, server))
}

fencelock_bench::define_bench!(etcd => setup());
