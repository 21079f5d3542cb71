//! `DynamoStorage`: the fence rule of DESIGN section 2 as one conditional `UpdateItem` per
//! operation.

use std::sync::Arc;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use fencelock_core::{
    Error, Fence, FenceRule, FencedStorage, FencingToken, LockKey, Result, Snapshot, async_trait,
    validate_value,
};

use crate::error::{BACKEND, protocol};
use crate::item::{
    Item, Written, get_number, get_owner, get_text, new_version, number, text, update,
};
use crate::table::{PARTITION_KEY, Shared};

/// The largest value kept inside the resource's own item (DynamoDB's item limit is 400 KB,
/// names and key included); a larger one goes into chunk items of this size.
pub const MAX_INLINE_LEN: usize = 350 * 1024;

/// The largest value [`DynamoStorage`] accepts unless configured otherwise: 4 MiB, in up to
/// 12 chunk items.
pub const DEFAULT_MAX_VALUE_LEN: usize = 4 << 20;

/// The attributes of a resource's item.
const FTOK: &str = "ftok";
const FOWNER: &str = "fowner";
const VAL: &str = "val";
const GEN: &str = "gen";
const CHUNKS: &str = "chunks";

/// Fenced reads that meet a value replaced under them before they try again no more.
const ATTEMPTS: usize = 8;

/// Fenced storage on one DynamoDB table: per resource the item `pk = "<prefix>data/<resource>"`
/// holding the last admitted fence (`ftok` N, `fowner` S) and the value.
///
/// # One conditional write per admission
///
/// Every fenced operation is one `UpdateItem` whose condition is the fence rule:
/// `attribute_not_exists(ftok) OR ftok < :t OR (ftok = :t AND fowner = :o)` (without the
/// last case under [`FenceRule::Strict`]). It records the presented fence and, for a write,
/// the value, in the same atomic step; a read asks the new item back. A failed condition
/// returns the item as it was (`ALL_OLD`), whose fence is the `current` of the
/// [`Error::Stale`]; nothing was written.
///
/// # Values above 350 KiB
///
/// A value up to [`MAX_INLINE_LEN`] bytes is the item's `val` (B). A larger one (up to
/// [`max_value_len`](Self::max_value_len), 4 MiB by default) is first written as chunk items
/// `<prefix>chunk/<generation>/<n>` under a fresh random generation, which nothing else
/// names yet; then the admitting `UpdateItem` points the resource at that generation
/// (`gen`, `chunks`). So the admission is still the one conditional write: chunks of a
/// refused write are never pointed at (and are deleted), and a reader follows the generation
/// its own admission returned. The chunks of the value replaced are deleted after the
/// admission; a reader that finds one gone was overtaken by that write and admits again
/// (its fence is still admitted, or it is now `Stale`).
#[derive(Debug, Clone)]
pub struct DynamoStorage {
    shared: Arc<Shared>,
    rule: FenceRule,
    max_value_len: usize,
}

/// A stored value, as the resource's item names it.
enum Stored {
    None,
    Inline(Vec<u8>),
    Chunked { generation: String, chunks: u64 },
}

impl DynamoStorage {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        DynamoStorage {
            shared,
            rule: FenceRule::Monotonic,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
        }
    }

    /// The same storage applying `rule` (default [`FenceRule::Monotonic`]).
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    /// The same storage accepting values up to `len` bytes (default
    /// [`DEFAULT_MAX_VALUE_LEN`]); each [`MAX_INLINE_LEN`] bytes past the first are one more
    /// item written per write and read per read.
    pub fn max_value_len(mut self, len: usize) -> Self {
        self.max_value_len = len;
        self
    }

    fn pk(&self, resource: &LockKey) -> String {
        format!("{}data/{}", self.shared.prefix, resource.as_str())
    }

    fn chunk_pk(&self, generation: &str, index: u64) -> String {
        format!("{}chunk/{generation}/{index}", self.shared.prefix)
    }

    /// The condition of the fence rule, on `:t` and `:o`.
    fn condition(&self) -> &'static str {
        match self.rule {
            FenceRule::Strict => "attribute_not_exists(#ftok) OR #ftok < :t",
            _ => "attribute_not_exists(#ftok) OR #ftok < :t OR (#ftok = :t AND #fowner = :o)",
        }
    }

    /// An admitting `UpdateItem` of `resource` for `fence`, its update expression still to
    /// come.
    fn admit(
        &self,
        resource: &LockKey,
        fence: Fence,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .key(PARTITION_KEY, text(self.pk(resource)))
            .condition_expression(self.condition())
            .expression_attribute_names("#ftok", FTOK)
            .expression_attribute_names("#fowner", FOWNER)
            .expression_attribute_values(":t", number(fence.token.get()))
            .expression_attribute_values(":o", text(fence.owner.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// The fence an item holds; `None` when it holds none.
    fn fence(&self, item: &Item) -> Result<Option<Fence>> {
        let token = get_number(&self.shared, item, FTOK)?;
        let owner = get_owner(&self.shared, item, FOWNER)?;
        match (token, owner) {
            (None, None) => Ok(None),
            (Some(token), Some(owner)) => {
                let token = FencingToken::new(token)
                    .ok_or_else(|| protocol(&self.shared.label, "a fence with token 0"))?;
                Ok(Some(Fence::new(token, owner)))
            }
            _ => Err(protocol(
                &self.shared.label,
                "a fence without its token or owner",
            )),
        }
    }

    /// The `Stale` of a refused admission, from the item the failed condition returned.
    fn stale(&self, resource: &LockKey, presented: Fence, old: Option<Item>) -> Error {
        let current = old.as_ref().map(|item| self.fence(item));
        match current {
            Some(Ok(Some(current))) => Error::Stale {
                resource: resource.to_string(),
                presented,
                current,
            },
            Some(Err(e)) => e,
            _ => protocol(
                &self.shared.label,
                "a fenced operation's condition failed on an item without a fence",
            ),
        }
    }

    fn stored(&self, item: &Item) -> Result<Stored> {
        if let Some(value) = item.get(VAL) {
            return match value {
                AttributeValue::B(blob) => Ok(Stored::Inline(blob.clone().into_inner())),
                _ => Err(protocol(
                    &self.shared.label,
                    "attribute `val` is not binary",
                )),
            };
        }
        match (
            get_text(&self.shared, item, GEN)?,
            get_number(&self.shared, item, CHUNKS)?,
        ) {
            (Some(generation), Some(chunks)) => Ok(Stored::Chunked {
                generation: generation.to_owned(),
                chunks,
            }),
            (None, None) => Ok(Stored::None),
            _ => Err(protocol(
                &self.shared.label,
                "a chunked value without `gen` or `chunks`",
            )),
        }
    }

    /// The value `stored` names; `Ok(None)` when a chunk is gone (a newer write replaced the
    /// value after this caller read the item: it reads again).
    async fn load(&self, stored: Stored) -> Result<Option<Option<Vec<u8>>>> {
        let (generation, chunks) = match stored {
            Stored::None => return Ok(Some(None)),
            Stored::Inline(value) => return Ok(Some(Some(value))),
            Stored::Chunked { generation, chunks } => (generation, chunks),
        };
        let mut value = Vec::new();
        for index in 0..chunks {
            let output = self
                .shared
                .client
                .get_item()
                .table_name(&self.shared.table)
                .key(PARTITION_KEY, text(self.chunk_pk(&generation, index)))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| self.shared.error("read a value chunk", e))?;
            match output.item.as_ref().and_then(|item| item.get(VAL)) {
                Some(AttributeValue::B(blob)) => value.extend_from_slice(blob.as_ref()),
                Some(_) => {
                    return Err(protocol(
                        &self.shared.label,
                        "a chunk's `val` is not binary",
                    ));
                }
                None => return Ok(None),
            }
        }
        Ok(Some(Some(value)))
    }

    /// Writes `value` as chunk items of a fresh generation; returns the generation and count.
    async fn write_chunks(&self, value: &[u8]) -> Result<(String, u64)> {
        let generation = new_version();
        let mut count = 0u64;
        for chunk in value.chunks(MAX_INLINE_LEN) {
            let written = self
                .shared
                .client
                .put_item()
                .table_name(&self.shared.table)
                .item(PARTITION_KEY, text(self.chunk_pk(&generation, count)))
                .item(VAL, AttributeValue::B(Blob::new(chunk)))
                .send()
                .await;
            if let Err(e) = written {
                self.delete_chunks(&generation, count).await;
                return Err(self.shared.error("write a value chunk", e));
            }
            count += 1;
        }
        Ok((generation, count))
    }

    /// Deletes the chunk items of `generation`, best effort: one left behind is garbage that
    /// nothing names, never a value anyone reads.
    async fn delete_chunks(&self, generation: &str, chunks: u64) {
        for index in 0..chunks {
            let deleted = self
                .shared
                .client
                .delete_item()
                .table_name(&self.shared.table)
                .key(PARTITION_KEY, text(self.chunk_pk(generation, index)))
                .send()
                .await;
            if let Err(e) = deleted {
                tracing::warn!(
                    "could not delete a replaced value chunk in {}: {}",
                    self.shared.label,
                    self.shared.error("delete a value chunk", e)
                );
            }
        }
    }
}

#[async_trait]
impl FencedStorage for DynamoStorage {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn max_value_len(&self) -> usize {
        self.max_value_len
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        for _ in 0..ATTEMPTS {
            let request = self
                .admit(resource, fence)
                .update_expression("SET #ftok = :t, #fowner = :o")
                .return_values(ReturnValue::AllNew);
            match update(&self.shared, "fenced read", request).await? {
                Written::Applied(new) => {
                    if let Some(value) = self.load(self.stored(&new)?).await? {
                        return Ok(value);
                    }
                }
                Written::Refused(old) => return Err(self.stale(resource, fence, old)),
            }
        }
        Err(Error::Conflict {
            backend: BACKEND,
            message: format!(
                "fenced read of {resource:?} in {}: the value was replaced under each of \
                 {ATTEMPTS} reads",
                self.shared.label
            ),
            source: None,
        })
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        validate_value(value, self.max_value_len)?;
        let mut request = self
            .admit(resource, fence)
            .return_values(ReturnValue::UpdatedOld);
        let chunked = if value.len() <= MAX_INLINE_LEN {
            request = request
                .update_expression("SET #ftok = :t, #fowner = :o, #val = :val REMOVE #gen, #chunks")
                .expression_attribute_values(":val", AttributeValue::B(Blob::new(value)));
            None
        } else {
            let (generation, chunks) = self.write_chunks(value).await?;
            request = request
                .update_expression(
                    "SET #ftok = :t, #fowner = :o, #gen = :gen, #chunks = :chunks REMOVE #val",
                )
                .expression_attribute_values(":gen", text(&generation))
                .expression_attribute_values(":chunks", number(chunks));
            Some((generation, chunks))
        };
        let request = request
            .expression_attribute_names("#val", VAL)
            .expression_attribute_names("#gen", GEN)
            .expression_attribute_names("#chunks", CHUNKS);
        match update(&self.shared, "fenced write", request).await {
            Ok(Written::Applied(old)) => {
                if let Stored::Chunked { generation, chunks } = self.stored(&old)? {
                    self.delete_chunks(&generation, chunks).await;
                }
                Ok(())
            }
            Ok(Written::Refused(old)) => {
                if let Some((generation, chunks)) = &chunked {
                    self.delete_chunks(generation, *chunks).await;
                }
                Err(self.stale(resource, fence, old))
            }
            // Unknown outcome: the chunks may be the value now, so they stay.
            Err(e) => Err(e),
        }
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        for _ in 0..ATTEMPTS {
            let output = self
                .shared
                .client
                .get_item()
                .table_name(&self.shared.table)
                .key(PARTITION_KEY, text(self.pk(resource)))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| self.shared.error("peek", e))?;
            let Some(item) = output.item else {
                return Ok(None);
            };
            let Some(fence) = self.fence(&item)? else {
                return Ok(None);
            };
            if let Some(value) = self.load(self.stored(&item)?).await? {
                return Ok(Some(Snapshot { value, fence }));
            }
        }
        Err(Error::Conflict {
            backend: BACKEND,
            message: format!(
                "peek of {resource:?} in {}: the value was replaced under each of {ATTEMPTS} reads",
                self.shared.label
            ),
            source: None,
        })
    }
}
