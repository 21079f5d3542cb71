//! What `fencelock bench` measures the DynamoDB backend against: the raw conditional put and
//! delete a user writes on the same table ([`DynamoBaseline`]), and the sweep of a run's items
//! ([`DynamoCleanup`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use fencelock_core::tools::{Baseline, Cleanup, Op, RawTryLock, TTL};
use fencelock_core::{LockKey, Result, async_trait};

use crate::item::{Item, get_number, get_text, text};
use crate::table::{PARTITION_KEY, Shared};

/// The raw baseline on DynamoDB, what a user writes without fencelock: a `PutItem`
/// conditioned on `attribute_not_exists(pk)` to take the lock and a `DeleteItem` to free it;
/// plain `PutItem`s; an eventually consistent `GetItem` as the cheapest request. Its items live
/// under `<prefix>bench-raw/<run>/`, and [`Baseline::close`] deletes those it wrote.
#[derive(Debug)]
pub struct DynamoBaseline {
    shared: Arc<Shared>,
    root: String,
    /// The plain writers' items, deleted by `close`.
    written: Arc<Mutex<BTreeSet<String>>>,
}

impl DynamoBaseline {
    pub(crate) fn new(shared: Arc<Shared>, run: &str) -> Self {
        let root = format!("{}bench-raw/{run}/", shared.prefix);
        DynamoBaseline {
            shared,
            root,
            written: Arc::default(),
        }
    }
}

#[async_trait]
impl RawTryLock for DynamoBaseline {
    const LABEL: &'static str = "raw conditional PutItem + DeleteItem";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        let pk = format!("{}lock/{key}", self.root);
        let expiry = TTL.as_millis().to_string();
        let put = self
            .shared
            .client
            .put_item()
            .table_name(&self.shared.table)
            .item(PARTITION_KEY, text(&pk))
            .item("lease_ms", AttributeValue::N(expiry))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match put {
            Ok(_) => {}
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => return Ok(false),
            Err(e) => return Err(self.shared.error("raw PutItem", e)),
        }
        self.shared
            .client
            .delete_item()
            .table_name(&self.shared.table)
            .key(PARTITION_KEY, text(&pk))
            .send()
            .await
            .map_err(|e| self.shared.error("raw DeleteItem", e))?;
        Ok(true)
    }
}

#[async_trait]
impl Baseline for DynamoBaseline {
    fn round_trip_label(&self) -> String {
        "raw GetItem".into()
    }

    fn write_label(&self) -> String {
        "raw PutItem".into()
    }

    async fn round_trip(&self) -> Result<()> {
        self.shared
            .client
            .get_item()
            .table_name(&self.shared.table)
            .key(PARTITION_KEY, text(format!("{}ping", self.root)))
            .send()
            .await
            .map_err(|e| self.shared.error("raw GetItem", e))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        let pk = format!("{}data/{resource}", self.root);
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(pk.clone());
        Ok(Box::new(PlainWriter {
            shared: self.shared.clone(),
            pk,
        }))
    }

    async fn close(&self) -> Result<()> {
        let written: Vec<String> =
            std::mem::take(&mut *self.written.lock().unwrap_or_else(PoisonError::into_inner))
                .into_iter()
                .collect();
        for pk in written {
            delete(&self.shared, &pk).await?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct PlainWriter {
    shared: Arc<Shared>,
    pk: String,
}

#[async_trait]
impl Op for PlainWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        self.shared
            .client
            .put_item()
            .table_name(&self.shared.table)
            .item(PARTITION_KEY, text(&self.pk))
            .item("val", AttributeValue::B(Blob::new(vec![7u8; 64])))
            .send()
            .await
            .map_err(|e| self.shared.error("raw PutItem", e))?;
        Ok(None)
    }
}

/// Deletes every item fencelock's backend and storage wrote for a run's keys under the
/// installation's prefix: lock items (token counters included: nobody locks a finished run's
/// keys again, section 7), data items, and the chunk items they name. It finds them with a
/// `Scan` of the table filtered on the partition key's start, which reads the whole table:
/// meant for benchmark tables, not for a production table's sweep.
#[derive(Debug)]
pub struct DynamoCleanup {
    shared: Arc<Shared>,
}

impl DynamoCleanup {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        DynamoCleanup { shared }
    }

    /// Every item whose partition key starts with `start`.
    async fn scan(&self, start: &str) -> Result<Vec<Item>> {
        let mut found = Vec::new();
        let mut from: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .shared
                .client
                .scan()
                .table_name(&self.shared.table)
                .filter_expression("begins_with(pk, :start)")
                .expression_attribute_values(":start", text(start))
                .consistent_read(true)
                .set_exclusive_start_key(from.take())
                .send()
                .await
                .map_err(|e| self.shared.error("scan the run's items", e))?;
            found.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(key) if !key.is_empty() => from = Some(key),
                _ => return Ok(found),
            }
        }
    }
}

#[async_trait]
impl Cleanup for DynamoCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        let prefix = &self.shared.prefix;
        for family in ["lock", "data"] {
            for item in self.scan(&format!("{prefix}{family}/{key_prefix}")).await? {
                if let (Some(generation), Some(chunks)) = (
                    get_text(&self.shared, &item, "gen")?,
                    get_number(&self.shared, &item, "chunks")?,
                ) {
                    for index in 0..chunks {
                        delete(&self.shared, &format!("{prefix}chunk/{generation}/{index}"))
                            .await?;
                    }
                }
                if let Some(pk) = get_text(&self.shared, &item, PARTITION_KEY)? {
                    delete(&self.shared, pk).await?;
                }
            }
        }
        Ok(())
    }
}

async fn delete(shared: &Shared, pk: &str) -> Result<()> {
    shared
        .client
        .delete_item()
        .table_name(&shared.table)
        .key(PARTITION_KEY, text(pk))
        .send()
        .await
        .map_err(|e| shared.error("delete a run's item", e))?;
    Ok(())
}
