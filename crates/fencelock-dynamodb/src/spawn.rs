//! A throwaway DynamoDB API for fault runs (`fencelock chaos --spawn dynamodb`), behind the
//! `servers` feature: one moto server behind the serializing proxy ([`MotoDynamo`]), a table
//! created on it, and the lock and the storage both on that table under a prefix of the run.

use std::sync::Arc;

use fencelock_core::tools::{SpawnFuture, SpawnRequest, SpawnedServers};
use fencelock_core::{Error, Result};
use fencelock_servers::set::{self, ServerSet};

use crate::config::DynamoConfig;
use crate::error::BACKEND;
use crate::servers::MotoDynamo;

/// The table a spawned server holds.
pub(crate) const SPAWNED_TABLE: &str = "fencelock-chaos";

/// `dynamodb://`: one moto server.
pub(crate) fn dynamodb(request: SpawnRequest) -> SpawnFuture {
    Box::pin(spawn(request))
}

async fn spawn(request: SpawnRequest) -> Result<Box<dyn SpawnedServers>> {
    if request.nodes != 1 {
        return Err(Error::config(format!(
            "spawning dynamodb starts one moto server, not {}: use --spawn dynamodb",
            request.nodes
        )));
    }
    let moto = set::start("moto", fencelock_servers::moto::Moto::try_start).await?;
    let server = MotoDynamo::in_front_of(moto)
        .await
        .map_err(|e| Error::Unavailable {
            backend: BACKEND,
            message: format!("cannot start the serializing proxy in front of moto: {e}"),
            source: Some(Box::new(e)),
        })?;
    let prefix = format!("fencelock-chaos/{}/", request.run_tag);
    let config = DynamoConfig::from_url(&server.url(SPAWNED_TABLE, ""))?.prefix(prefix.clone());
    // Created once here, so the workers' config needs no `create=true`.
    DynamoConfig::from_url(&server.url(SPAWNED_TABLE, "&create=true"))?
        .connect()
        .await?;
    let described = format!(
        "a spawned moto server (DynamoDB API, one request at a time through a serializing \
         proxy; in memory, so never killed: the kill fault has no server to take down), \
         table {SPAWNED_TABLE}, storage on the same table (items under {prefix})"
    );
    // No process to kill: moto keeps its tables in memory, so a killed and restarted moto
    // would come back empty and restart every token at 1, which no DynamoDB table does. The
    // set therefore offers no node to the kill fault; pause and partition apply.
    let servers = ServerSet::new("moto", config, described, Vec::new())
        .kill_at_most(0)
        .keep(Arc::new(server));
    Ok(Box::new(servers))
}
