//! Connecting to a Redis Cluster: the driver's cluster connection, a check that it answers,
//! and what every master says about eviction and persistence.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;

use fencelock_core::{Error, HostPort, Result};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Client, FromRedisValue, RedisResult, Value};
use tracing::Instrument;

use super::config::RedisClusterConfig;
use crate::connection::{Connection, ServerSettings, connect_failure, no_answer, refuse_eviction};
use crate::error::{REDIS_CLUSTER as BACKEND, bounded};
use crate::link::Link;

/// What connecting learned about the cluster's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topology {
    /// The address of every master serving slots.
    pub(crate) masters: Vec<HostPort>,
    /// Whether any master has a replica, which a failover may promote.
    pub(crate) replicated: bool,
}

/// Connects to the cluster `config` names: checks that it answers, reads the topology, and
/// refuses it if any master may evict keys (unless allowed). Returns the connection for the
/// backend and storage code, the driver's own connection (for `RedisFence`), and the
/// topology.
pub(crate) async fn open(
    config: &RedisClusterConfig,
) -> Result<(Connection, ClusterConnection, Topology)> {
    let keys = config.validate()?;
    let seeds: Vec<String> = config.hosts().iter().map(HostPort::to_string).collect();
    let server = format!("redis cluster {}", seeds.join(","));
    let call_timeout = config.call_limit();
    let connect_timeout = config.connect_limit();
    let all_urls = config.seed_urls();
    let hosts = config.hosts();
    let answers = seed_answers(&all_urls, connect_timeout + call_timeout).await;
    let silent: Vec<String> = hosts
        .iter()
        .zip(&answers)
        .filter(|(_, answer)| answer.is_none())
        .map(|(host, _)| host.to_string())
        .collect();
    let slowest = answers.iter().flatten().max().copied();
    // Every seed silent: leave them all to the driver, whose error names them.
    let urls: Vec<String> = match slowest {
        Some(_) => all_urls
            .iter()
            .zip(&answers)
            .filter(|(_, answer)| answer.is_some())
            .map(|(url, _)| url.clone())
            .collect(),
        None => all_urls.clone(),
    };
    for seed in &silent {
        tracing::warn!(
            backend = BACKEND,
            seed = %seed,
            "redis cluster seed {seed} did not answer PING while others did; skipped"
        );
    }
    crate::connection::ensure_crypto_provider();
    let client = ClusterClientBuilder::new(urls.clone())
        .connection_timeout(node_connect_limit(connect_timeout, slowest))
        .response_timeout(call_timeout)
        .build()
        .map_err(|e| Error::InvalidConfig {
            message: format!("{} is not usable: {e}", config.redacted_url()),
            source: Some(Box::new(e)),
        })?;
    // One seed's plain client, to ask what the server says to refused credentials.
    let seed = Client::open(urls[0].as_str()).map_err(|e| Error::InvalidConfig {
        message: format!("{} is not usable: {e}", config.redacted_url()),
        source: Some(Box::new(e)),
    })?;
    let failed = |e| connect_failure(BACKEND, &server, &seed, call_timeout, e);
    let span = tracing::debug_span!("connect", backend = BACKEND, server = %server);
    let limit = connect_timeout + call_timeout;
    let cluster = match tokio::time::timeout(limit, client.get_async_connection())
        .instrument(span)
        .await
    {
        Ok(Ok(cluster)) => cluster,
        Ok(Err(e)) => return Err(failed(seed_error(&seed, limit).await.unwrap_or(e)).await),
        Err(_) => {
            let mut error = no_answer(BACKEND, &server, limit);
            if !silent.is_empty() {
                error = error.in_context(&format!("silent seeds {}", silent.join(",")));
            }
            return Err(error);
        }
    };
    let topology = match tokio::time::timeout(call_timeout, cluster_nodes(&cluster)).await {
        Ok(Ok(reply)) => topology_of(&server, reply)?,
        Ok(Err(e)) => return Err(failed(e).await),
        Err(_) => return Err(no_answer(BACKEND, &server, call_timeout)),
    };
    if topology.masters.is_empty() {
        return Err(Error::config(format!(
            "{server}: the cluster has no master serving slots (is it created?)"
        )));
    }
    let mut per_master = Vec::with_capacity(topology.masters.len());
    for master in &topology.masters {
        let settings = read_settings(&cluster, master, call_timeout).await;
        refuse_eviction(
            &settings,
            &format!("redis cluster master {master}"),
            config.evictions_allowed(),
        )?;
        per_master.push(settings);
    }
    let connection = Connection {
        backend: BACKEND,
        server,
        client: None,
        link: Link::Cluster(cluster.clone()),
        keys,
        call_timeout,
        connect_timeout,
        settings: ServerSettings::all(&per_master),
    };
    Ok((connection, cluster, topology))
}

/// How long a seed that answers later than the first one may take before it is skipped:
/// a node that is up answers a PING in about the time the others did.
const SEED_GRACE: Duration = Duration::from_millis(250);

/// How long each seed took to answer a PING (an error reply counts: the node is alive),
/// `None` for a seed that did not answer within `limit`, or within [`SEED_GRACE`] (or four
/// times the first answer's time, if longer) after the first answer came.
async fn seed_answers(urls: &[String], limit: Duration) -> Vec<Option<Duration>> {
    let started = Instant::now();
    let mut pending: FuturesUnordered<_> = urls
        .iter()
        .enumerate()
        .map(|(index, url)| async move {
            let ask = async {
                let client = Client::open(url.as_str()).ok()?;
                let mut conn = client.get_multiplexed_async_connection().await.ok()?;
                let _: RedisResult<()> = redis::cmd("PING").query_async(&mut conn).await;
                Some(())
            };
            let answered = tokio::time::timeout(limit, ask).await.ok().flatten();
            (index, answered.map(|()| started.elapsed()))
        })
        .collect();
    let mut answers = vec![None; urls.len()];
    let mut deadline = started + limit;
    while let Ok(Some((index, answer))) = tokio::time::timeout_at(deadline, pending.next()).await {
        if let Some(took) = answer {
            if answers.iter().all(Option::is_none) {
                deadline = deadline.min(Instant::now() + SEED_GRACE.max(took * 4));
            }
            answers[index] = Some(took);
        }
    }
    answers
}

/// The driver's time-out for connecting to one node: the configured one, but no more than
/// ten times what the slowest answering seed took (at least a second), so that one frozen
/// node (a replica the slot map lists) cannot hold up the connect for the whole time-out.
fn node_connect_limit(configured: Duration, slowest: Option<Duration>) -> Duration {
    match slowest {
        Some(took) => configured.min((took * 10).max(Duration::from_secs(1))),
        None => configured,
    }
}

/// The masters serving slots now, as one node's `CLUSTER NODES` lists them, read through
/// `cluster` within `limit`; errors name `server`.
pub(crate) async fn masters(
    cluster: &ClusterConnection,
    server: &str,
    limit: std::time::Duration,
) -> Result<Vec<HostPort>> {
    let reply = bounded(BACKEND, limit, "CLUSTER NODES", cluster_nodes(cluster))
        .await
        .map_err(|e| e.in_context(server))?;
    Ok(topology_of(server, reply)?.masters)
}

/// `CLUSTER NODES` on one node of the cluster (any one: each knows the whole topology).
async fn cluster_nodes(cluster: &ClusterConnection) -> RedisResult<Value> {
    cluster
        .clone()
        .route_command(
            redis::cmd("CLUSTER").arg("NODES").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await
}

/// The topology in a `CLUSTER NODES` reply from `server`.
fn topology_of(server: &str, reply: Value) -> Result<Topology> {
    let nodes = String::from_redis_value(reply).map_err(|e| Error::Backend {
        backend: BACKEND,
        message: format!("{server}: CLUSTER NODES answered something unexpected: {e}"),
        source: None,
    })?;
    Ok(parse_topology(&nodes))
}

/// What the first seed says to a plain connection and a PING, when the cluster client failed:
/// the cluster client folds refused credentials and protocol errors into "failed to create
/// initial connections", while one server's connection names them.
async fn seed_error(seed: &Client, limit: std::time::Duration) -> Option<redis::RedisError> {
    let ask = async {
        let mut conn = match seed.get_multiplexed_async_connection().await {
            Ok(conn) => conn,
            Err(e) => return Some(e),
        };
        redis::cmd("PING").query_async::<()>(&mut conn).await.err()
    };
    tokio::time::timeout(limit, ask).await.ok().flatten()
}

/// `CONFIG GET` of the settings that bear on fencing on the master at `master`; whatever
/// it refuses stays unknown.
async fn read_settings(
    cluster: &ClusterConnection,
    master: &HostPort,
    limit: std::time::Duration,
) -> ServerSettings {
    let read = |pattern: &'static str| {
        let mut conn = cluster.clone();
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: master.host.clone(),
            port: master.port,
        });
        async move {
            let reply = bounded(
                BACKEND,
                limit,
                "CONFIG GET",
                conn.route_command(
                    redis::cmd("CONFIG").arg("GET").arg(pattern).clone(),
                    routing,
                ),
            )
            .await
            .map_err(|e| e.in_context(&master.to_string()))?;
            HashMap::<String, String>::from_redis_value(reply).map_err(|e| Error::Backend {
                backend: BACKEND,
                message: e.to_string(),
                source: None,
            })
        }
    };
    let append = read("append*").await;
    let memory = read("maxmemory-policy").await;
    match (append, memory) {
        (Ok(append), Ok(memory)) => ServerSettings::from_replies(&append, &memory),
        (Ok(append), Err(_)) => ServerSettings::from_replies(&append, &HashMap::new()),
        (Err(_), Ok(memory)) => ServerSettings::from_replies(&HashMap::new(), &memory),
        (Err(_), Err(_)) => ServerSettings::default(),
    }
}

/// The masters serving slots, and whether any has a live replica, from `CLUSTER NODES`:
/// `<id> <ip:port@cport[,hostname]> <flags> <master-id> <ping> <pong> <epoch> <link> <slots>...`.
pub(crate) fn parse_topology(nodes: &str) -> Topology {
    let mut masters = Vec::new();
    let mut master_ids = Vec::new();
    let mut replicas_of = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            continue;
        }
        let flags: Vec<&str> = fields[2].split(',').collect();
        if flags
            .iter()
            .any(|f| matches!(*f, "fail" | "fail?" | "noaddr" | "handshake"))
        {
            continue;
        }
        let address = fields[1].split(['@', ',']).next().unwrap_or_default();
        let Some((host, port)) = address.rsplit_once(':') else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        if flags.contains(&"master") && fields.len() > 8 {
            masters.push(HostPort::new(host.trim_matches(['[', ']']), port));
            master_ids.push(fields[0]);
        } else if flags.contains(&"slave") || flags.contains(&"replica") {
            replicas_of.push(fields[3]);
        }
    }
    let replicated = replicas_of.iter().any(|id| master_ids.contains(id));
    Topology {
        masters,
        replicated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_and_replicas_are_read_from_cluster_nodes() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001,host-b master - 0 1 2 connected 5461-10922
c3 127.0.0.1:7002@17002 master,fail - 0 1 3 disconnected 10923-16383
d4 127.0.0.1:7003@17003 slave a1 0 1 1 connected
e5 127.0.0.1:7004@17004 master - 0 1 0 connected
f6 [::1]:7005@17005 master - 0 1 4 connected 10923-16383
g7 :0@0 master,noaddr - 0 1 5 disconnected 0-1
h8 127.0.0.1:7007@17007 master,handshake - 0 1 6 connected 2-3
";
        let topology = parse_topology(nodes);
        assert_eq!(
            topology.masters,
            vec![
                HostPort::new("127.0.0.1", 7000),
                HostPort::new("127.0.0.1", 7001),
                HostPort::new("::1", 7005),
            ]
        );
        assert!(topology.replicated);
        let without = parse_topology(&nodes.replace("slave a1", "slave c3"));
        assert!(!without.replicated);
    }
}
