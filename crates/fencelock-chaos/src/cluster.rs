//! The servers a chaos run talks to, and the handles the nemesis pulls: spawned redis-server
//! nodes (killed and restarted), fault proxies in front of every server (partitions), and an
//! admin session on Postgres (`pg_terminate_backend`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fencelock::postgres::sqlx;
use fencelock::spec::BackendSpec;

use crate::config::Persistence;
use crate::error::{ChaosError, Result};
use crate::proxy::FaultProxy;
use crate::redis::{RedisOptions, RedisServer};

/// Which family of backend is under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    Redis,
    Redlock,
    Postgres,
}

impl Family {
    fn default_port(self) -> u16 {
        match self {
            Family::Redis | Family::Redlock => 6379,
            Family::Postgres => 5432,
        }
    }
}

/// Everything a run talks to.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) family: Family,
    /// The lock service spec for workers (through the proxies when there are any), before
    /// the Postgres session tag.
    lock_spec: String,
    /// The storage spec handed to workers, when the storage is not the lock service's own.
    pub(crate) worker_storage: Option<String>,
    /// The storage, reached directly, for the final read.
    pub(crate) direct_storage: BackendSpec,
    /// Lock nodes this process started and may kill.
    pub(crate) nodes: Vec<Arc<RedisServer>>,
    /// A separate storage node this process started, never killed; held so that it lives
    /// as long as the run.
    _storage_node: Option<Arc<RedisServer>>,
    /// Fault proxies in front of every server the workers reach.
    pub(crate) proxies: Vec<FaultProxy>,
    /// Postgres: the admin pool and the application name the workers' sessions carry.
    pub(crate) pg: Option<PgAdmin>,
    /// How the spec was given, for the report (passwords hidden).
    pub(crate) described: String,
}

/// An admin pool on the Postgres server under test.
#[derive(Debug)]
pub(crate) struct PgAdmin {
    pub(crate) pool: sqlx::PgPool,
    pub(crate) application_name: String,
}

impl Cluster {
    /// Starts `count` redis-server processes, plus a separate persistent storage node
    /// unless there is one persistent lock node (which then keeps the storage too). A storage
    /// that loses admitted writes in a restart is data loss, not a fencing failure, so the
    /// storage always lives on a persistent node.
    pub(crate) async fn spawn_redis(
        count: usize,
        persistence: Persistence,
        proxied: bool,
    ) -> Result<Self> {
        if count == 0 {
            return Err(ChaosError::config("spawning Redis needs at least one node"));
        }
        let persistent = persistence == Persistence::Always;
        let options = if persistent {
            RedisOptions::persistent()
        } else {
            RedisOptions::default()
        };
        let mut nodes = Vec::with_capacity(count);
        for _ in 0..count {
            nodes.push(Arc::new(start_redis(options.clone()).await?));
        }
        let shared_storage = count == 1 && persistent;
        let storage_node = if shared_storage {
            None
        } else {
            Some(Arc::new(start_redis(RedisOptions::persistent()).await?))
        };
        let mut proxies = Vec::new();
        let mut lock_addrs = Vec::new();
        for node in &nodes {
            lock_addrs.push(if proxied {
                let proxy = start_proxy(node.addr()).await?;
                let addr = proxy.addr();
                proxies.push(proxy);
                addr
            } else {
                node.addr()
            });
        }
        let family = if count == 1 {
            Family::Redis
        } else {
            Family::Redlock
        };
        let hosts = lock_addrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let worker_backend = match family {
            Family::Redlock => format!("redlock://{hosts}"),
            _ => format!("redis://{hosts}"),
        };
        BackendSpec::parse(&worker_backend)?;
        let (worker_storage, direct_storage) = match &storage_node {
            Some(node) => {
                let via = if proxied {
                    let proxy = start_proxy(node.addr()).await?;
                    let addr = proxy.addr();
                    proxies.push(proxy);
                    addr
                } else {
                    node.addr()
                };
                (
                    Some(format!("redis://{via}")),
                    BackendSpec::parse(&node.url())?,
                )
            }
            None => (None, BackendSpec::parse(&nodes[0].url())?),
        };
        let described = format!(
            "{} spawned redis-server node{} ({}), storage on {}",
            count,
            if count == 1 { "" } else { "s" },
            if persistent {
                "AOF, appendfsync always"
            } else {
                "no persistence"
            },
            if shared_storage {
                "the same node"
            } else {
                "a separate persistent node that is never killed"
            }
        );
        Ok(Cluster {
            family,
            lock_spec: worker_backend,
            worker_storage,
            direct_storage,
            nodes,
            _storage_node: storage_node,
            proxies,
            pg: None,
            described,
        })
    }

    /// A backend the user runs. With `proxied`, a fault proxy is put in front of every host
    /// of the spec and the workers get the rewritten spec.
    pub(crate) async fn external(spec: &str, run_tag: &str, proxied: bool) -> Result<Self> {
        let parsed = BackendSpec::parse(spec)?;
        let family = match spec.split_once("://").map(|(scheme, _)| scheme) {
            Some("redis" | "rediss") => Family::Redis,
            Some("redlock") => Family::Redlock,
            Some("postgres" | "postgresql") => Family::Postgres,
            Some("memory") => {
                return Err(ChaosError::config(
                    "memory:// lives inside one process, and chaos runs its workers as separate \
                     processes (so that they can really be paused and killed): use a shared \
                     backend (redis://, redlock://, postgres://) or --spawn-redis N",
                ));
            }
            _ => {
                return Err(ChaosError::config(format!(
                    "chaos does not know how to reach the servers of {parsed}"
                )));
            }
        };
        let mut proxies = Vec::new();
        let worker_backend = if proxied {
            let (head, hosts, tail) = split_hosts(spec)?;
            let mut rewritten = Vec::with_capacity(hosts.len());
            for host in hosts {
                let target = resolve(host, family.default_port()).await?;
                let proxy = start_proxy(target).await?;
                rewritten.push(proxy.addr().to_string());
                proxies.push(proxy);
            }
            format!("{head}{}{tail}", rewritten.join(","))
        } else {
            spec.to_owned()
        };
        let pg = match &parsed {
            BackendSpec::Postgres { url, .. } => {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect(url)
                    .await
                    .map_err(|e| {
                        ChaosError::harness_from(
                            format!("cannot open the admin session on {parsed}: {e}"),
                            e,
                        )
                    })?;
                Some(PgAdmin {
                    pool,
                    application_name: format!("fencelock-chaos-{run_tag}"),
                })
            }
            _ => None,
        };
        Ok(Cluster {
            family,
            lock_spec: worker_backend,
            worker_storage: None,
            direct_storage: parsed.clone(),
            nodes: Vec::new(),
            _storage_node: None,
            proxies,
            pg,
            described: parsed.to_string(),
        })
    }

    /// The lock service spec handed to workers; Postgres sessions are tagged with an
    /// application name so that the terminate fault ends only this run's sessions.
    pub(crate) fn worker_backend(&self) -> String {
        match &self.pg {
            Some(pg) => {
                let sep = if self.lock_spec.contains('?') {
                    '&'
                } else {
                    '?'
                };
                format!(
                    "{}{sep}application_name={}",
                    self.lock_spec, pg.application_name
                )
            }
            None => self.lock_spec.clone(),
        }
    }

    /// Removes every network fault and restarts every lock node that is down.
    pub(crate) async fn heal(&self) -> Result<()> {
        for proxy in &self.proxies {
            proxy.heal();
        }
        for node in &self.nodes {
            if !node.is_running() {
                restart(node.clone()).await?;
            }
        }
        Ok(())
    }
}

async fn start_redis(options: RedisOptions) -> Result<RedisServer> {
    tokio::task::spawn_blocking(move || RedisServer::try_spawn_with(options))
        .await
        .map_err(|e| ChaosError::harness_from("starting redis-server failed", e))?
        .map_err(|e| ChaosError::harness_from(format!("cannot start redis-server: {e}"), e))
}

/// Starts a killed node again on its port and directory.
pub(crate) async fn restart(node: Arc<RedisServer>) -> Result<()> {
    tokio::task::spawn_blocking(move || node.try_restart())
        .await
        .map_err(|e| ChaosError::harness_from("restarting redis-server failed", e))?
        .map_err(|e| ChaosError::harness_from(e.to_string(), e))
}

/// Kills a node with SIGKILL.
pub(crate) async fn kill(node: Arc<RedisServer>) -> Result<()> {
    tokio::task::spawn_blocking(move || node.kill())
        .await
        .map_err(|e| ChaosError::harness_from("killing redis-server failed", e))
}

async fn start_proxy(target: SocketAddr) -> Result<FaultProxy> {
    FaultProxy::start(target).await.map_err(|e| {
        ChaosError::harness_from(format!("cannot start a fault proxy for {target}: {e}"), e)
    })
}

async fn resolve(host: &str, default_port: u16) -> Result<SocketAddr> {
    let with_port = if host.ends_with(']') || !host.contains(':') {
        format!("{host}:{default_port}")
    } else {
        host.to_owned()
    };
    tokio::net::lookup_host(with_port.as_str())
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| {
            ChaosError::config(format!(
                "cannot resolve {with_port} to put a fault proxy in front of it"
            ))
        })
}

/// Splits `scheme://[user@]h1[:p1],h2[:p2][/path][?query]` into the part before the hosts,
/// the hosts, and the rest.
fn split_hosts(spec: &str) -> Result<(&str, Vec<&str>, &str)> {
    let (scheme, rest) = spec
        .split_once("://")
        .ok_or_else(|| ChaosError::config("the backend spec is not a URL"))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let hosts_at = authority.rfind('@').map_or(0, |at| at + 1);
    let hosts = &authority[hosts_at..];
    if hosts.is_empty() {
        return Err(ChaosError::config(
            "partition needs a host and port in the spec (a Unix socket cannot be proxied)",
        ));
    }
    let head_len = scheme.len() + 3 + hosts_at;
    let tail_at = scheme.len() + 3 + end;
    Ok((
        &spec[..head_len],
        hosts.split(',').collect(),
        &spec[tail_at..],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_found_in_every_spec_form() {
        assert_eq!(
            split_hosts("redis://127.0.0.1:6379/2").unwrap(),
            ("redis://", vec!["127.0.0.1:6379"], "/2")
        );
        assert_eq!(
            split_hosts("redlock://a:1,b:2,[::1]:3").unwrap(),
            ("redlock://", vec!["a:1", "b:2", "[::1]:3"], "")
        );
        assert_eq!(
            split_hosts("postgres://u:p@w@db/test?backend=advisory").unwrap(),
            ("postgres://u:p@w@", vec!["db"], "/test?backend=advisory")
        );
        assert!(split_hosts("postgres:///test").is_err());
        assert!(split_hosts("nothing").is_err());
    }
}
