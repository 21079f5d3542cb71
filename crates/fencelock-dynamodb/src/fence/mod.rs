//! `DynamoFence`: the fence rule on the caller's own items, in the caller's own tables.

mod expression;
mod write;

use std::collections::HashSet;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    Delete, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use fencelock_core::{Error, Fence, FenceRule, FencingToken, OwnerId, Result};

use self::expression::{
    OWNER_NAME, OWNER_VALUE, TOKEN_NAME, TOKEN_VALUE, combined_condition, with_fence_set,
};
use self::write::Action;
pub use self::write::FencedWrite;
use crate::error::{BACKEND, map_dynamodb_error, protocol};
use crate::item::{Item, new_version, number, text};

/// The default names of the fence's attributes on the caller's items: the token (N) and the
/// owner (S, 32 hex digits).
pub const DEFAULT_FENCE_ATTRIBUTES: (&str, &str) = ("fencelock_token", "fencelock_owner");

/// The most writes one [`DynamoFence::transact`] takes: DynamoDB's limit on the actions of
/// one `TransactWriteItems`.
pub const MAX_TRANSACT_WRITES: usize = 100;

/// What an admitted fence's write came to.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub enum FenceOutcome {
    /// Written. For a single write, the attributes its
    /// [`return_values`](FencedWrite::return_values) asked for (empty when none); for a
    /// transaction, empty.
    Written(Item),
    /// Every fence was admitted, but the caller's own [`condition`](FencedWrite::condition)
    /// of the write at `index` (0 for a single write; its place in the list for a
    /// transaction) failed: nothing was written. `item` is that item as it is (`None` when
    /// there is none).
    ConditionFailed {
        /// The place of the write whose condition failed.
        index: usize,
        /// The item the condition was evaluated on.
        item: Option<Item>,
    },
}

/// Fenced writes on the caller's own items: each `PutItem`, `UpdateItem` or `DeleteItem` is
/// sent with a condition that admits the presented fence by the rule of DESIGN section 2
/// against the fence the item holds, and (put, update) records the fence in the item, in the
/// same atomic step. Made with [`DynamoFence::new`] on any client of the application's, or
/// with [`DynamoTable::fence`](crate::DynamoTable::fence) on the lock table's client; cheap to
/// clone.
///
/// Every item of the caller's keeps its fence in two attributes of its own,
/// [`DEFAULT_FENCE_ATTRIBUTES`] unless [`with_attributes`](Self::with_attributes) names
/// others: the last admitted token (N) and owner (S). The condition is
/// `attribute_not_exists(token) OR token < :t OR (token = :t AND owner = :o)` (the last case
/// dropped under [`FenceRule::Strict`]), joined with `AND` to the caller's own condition.
/// The caller builds the write with the SDK's own types ([`FencedWrite`]), never naming the
/// fence's attributes.
///
/// - A refused fence is [`Error::Stale`] with the presented fence and the item's, read from
///   the item the failed condition returns (`ReturnValuesOnConditionCheckFailure =
///   ALL_OLD`). Nothing was written.
/// - A fence that was admitted while the caller's own condition failed is
///   [`FenceOutcome::ConditionFailed`], with the item; nothing was written.
/// - [`transact`](Self::transact) applies several writes, each under its own fence, in one
///   `TransactWriteItems`: all of them or none. Its refusal is the first stale write's
///   [`Error::Stale`].
///
/// ```no_run
/// # async fn demo(
/// #     client: fencelock_dynamodb::aws_sdk_dynamodb::Client,
/// #     guard: fencelock_core::LockGuard,
/// # ) -> fencelock_core::Result<()> {
/// use std::collections::HashMap;
/// use fencelock_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
/// use fencelock_dynamodb::{DynamoFence, FencedWrite, FenceOutcome};
///
/// let fence = DynamoFence::new(client); // the application's own client
/// let account = |id: &str| HashMap::from([("id".to_owned(), AttributeValue::S(id.into()))]);
/// let debit = FencedWrite::update("accounts", account("10"), "SET #b = #b - :d")
///     .condition("#b >= :d") // the application's own condition, still honoured
///     .name("#b", "balance")
///     .value(":d", AttributeValue::N("100".into()));
/// match fence.write(debit, guard.fence()).await? { // Error::Stale once superseded
///     FenceOutcome::Written(_) => {}
///     FenceOutcome::ConditionFailed { .. } => println!("insufficient funds"),
/// }
///
/// // Two items, all or nothing, each under the fence of its own lock.
/// let credit = FencedWrite::update("accounts", account("11"), "ADD #b :d")
///     .name("#b", "balance")
///     .value(":d", AttributeValue::N("100".into()));
/// let audit = FencedWrite::put(
///     "audit",
///     HashMap::from([("id".to_owned(), AttributeValue::S("10->11".into()))]),
///     HashMap::from([("amount".to_owned(), AttributeValue::N("100".into()))]),
/// );
/// let _ = fence.transact([(credit, guard.fence()), (audit, guard.fence())]).await?;
/// # Ok(()) }
/// ```
///
/// # Unknown outcomes
///
/// An [`Error::Unavailable`] may have been applied. The SDK itself sends a request again
/// after an unanswered try (3 attempts): a transaction carries a client request token, so
/// DynamoDB applies it once however often it arrives (within 10 minutes); a single write
/// sent again meets its own write, which the rule admits again under
/// [`FenceRule::Monotonic`] (same token and owner), so a put or an idempotent update lands
/// once, but an update that adds (`ADD`, `SET #n = #n + :d`) can land twice. Guard such an
/// update with a condition of the caller's own (a version attribute), or send it through
/// [`transact`](Self::transact), whose token makes it idempotent.
#[derive(Debug, Clone)]
pub struct DynamoFence {
    client: Client,
    rule: FenceRule,
    token: String,
    owner: String,
}

impl DynamoFence {
    /// A fence of the items reached by `client` (any table it may write), applying
    /// [`FenceRule::Monotonic`], with the attributes [`DEFAULT_FENCE_ATTRIBUTES`].
    pub fn new(client: Client) -> Self {
        let (token, owner) = DEFAULT_FENCE_ATTRIBUTES;
        DynamoFence {
            client,
            rule: FenceRule::Monotonic,
            token: token.to_owned(),
            owner: owner.to_owned(),
        }
    }

    /// Applies `rule` instead of the default.
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    /// Keeps the fence in the attributes `token` (N) and `owner` (S) of each item. Two empty
    /// or equal names are [`Error::InvalidConfig`]. Every writer of an item must use the same
    /// names: a fence kept under other names is no fence to this one.
    pub fn with_attributes(
        mut self,
        token: impl Into<String>,
        owner: impl Into<String>,
    ) -> Result<Self> {
        let (token, owner) = (token.into(), owner.into());
        if token.is_empty() || owner.is_empty() || token == owner {
            return Err(Error::config(format!(
                "the fence's attributes must be two different non-empty names, not {token:?} \
                 and {owner:?}"
            )));
        }
        (self.token, self.owner) = (token, owner);
        Ok(self)
    }

    /// The rule this fence applies.
    pub fn rule(&self) -> FenceRule {
        self.rule
    }

    /// The fence's attribute names: (token, owner).
    pub fn attributes(&self) -> (&str, &str) {
        (&self.token, &self.owner)
    }

    /// The fence `item` holds (an item as a `GetItem` or a `Query` returns it); `None` when it
    /// holds none. A fence attribute of the wrong type, or one without the other, is
    /// [`Error::Backend`].
    pub fn fence_of(&self, item: &Item) -> Result<Option<Fence>> {
        let label = "an item's fence";
        let token = match item.get(&self.token) {
            None => None,
            Some(aws_sdk_dynamodb::types::AttributeValue::N(n)) => Some(
                n.parse::<u64>()
                    .ok()
                    .and_then(FencingToken::new)
                    .ok_or_else(|| protocol(label, &format!("`{}` holds {n:?}", self.token)))?,
            ),
            Some(_) => {
                return Err(protocol(
                    label,
                    &format!("`{}` is not a number", self.token),
                ));
            }
        };
        let owner = match item.get(&self.owner) {
            None => None,
            Some(aws_sdk_dynamodb::types::AttributeValue::S(s)) => Some(
                s.parse::<OwnerId>()
                    .map_err(|_| protocol(label, &format!("`{}` holds {s:?}", self.owner)))?,
            ),
            Some(_) => {
                return Err(protocol(
                    label,
                    &format!("`{}` is not a string", self.owner),
                ));
            }
        };
        match (token, owner) {
            (None, None) => Ok(None),
            (Some(token), Some(owner)) => Ok(Some(Fence::new(token, owner))),
            _ => Err(protocol(label, "a fence without its token or owner")),
        }
    }

    /// Applies `write` if `fence` is admitted on its item (and the write's own condition
    /// holds), recording `fence` in the item: one conditional request. A refused fence is
    /// [`Error::Stale`] and nothing was written; the checks of [`FencedWrite`] come before any
    /// I/O.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the request in flight: it lands or not as if the call
    /// had returned [`Error::Unavailable`].
    pub async fn write(&self, write: FencedWrite, fence: Fence) -> Result<FenceOutcome> {
        write.check(&self.token, &self.owner)?;
        let resource = write.resource();
        let label = format!("table {:?}", write.table);
        let has_own_condition = write.condition.is_some();
        let condition = combined_condition(self.strict(), write.condition.as_deref());
        let (names, values) = self.placeholders(&write, fence);
        let refused = match write.action {
            Action::Put(attributes) => {
                let mut item = attributes;
                item.extend(write.key);
                item.insert(self.token.clone(), number(fence.token.get()));
                item.insert(self.owner.clone(), text(fence.owner.to_string()));
                let sent = self
                    .client
                    .put_item()
                    .table_name(&write.table)
                    .set_item(Some(item))
                    .condition_expression(condition)
                    .set_expression_attribute_names(Some(names))
                    .set_expression_attribute_values(Some(values))
                    .set_return_values(write.return_values)
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .send()
                    .await;
                match sent {
                    Ok(output) => {
                        return Ok(FenceOutcome::Written(output.attributes.unwrap_or_default()));
                    }
                    Err(error) => match error.as_service_error() {
                        Some(PutItemError::ConditionalCheckFailedException(failed)) => {
                            failed.item().cloned()
                        }
                        _ if is_condition_failure(&error) => None,
                        _ => {
                            return Err(map_dynamodb_error(
                                BACKEND,
                                "fenced PutItem",
                                &label,
                                error,
                            ));
                        }
                    },
                }
            }
            Action::Update(expression) => {
                let sent = self
                    .client
                    .update_item()
                    .table_name(&write.table)
                    .set_key(Some(write.key))
                    .update_expression(with_fence_set(&expression))
                    .condition_expression(condition)
                    .set_expression_attribute_names(Some(names))
                    .set_expression_attribute_values(Some(values))
                    .set_return_values(write.return_values)
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .send()
                    .await;
                match sent {
                    Ok(output) => {
                        return Ok(FenceOutcome::Written(output.attributes.unwrap_or_default()));
                    }
                    Err(error) => match error.as_service_error() {
                        Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                            failed.item().cloned()
                        }
                        _ if is_condition_failure(&error) => None,
                        _ => {
                            return Err(map_dynamodb_error(
                                BACKEND,
                                "fenced UpdateItem",
                                &label,
                                error,
                            ));
                        }
                    },
                }
            }
            Action::Delete => {
                let sent = self
                    .client
                    .delete_item()
                    .table_name(&write.table)
                    .set_key(Some(write.key))
                    .condition_expression(condition)
                    .set_expression_attribute_names(Some(names))
                    .set_expression_attribute_values(Some(values))
                    .set_return_values(write.return_values)
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .send()
                    .await;
                match sent {
                    Ok(output) => {
                        return Ok(FenceOutcome::Written(output.attributes.unwrap_or_default()));
                    }
                    Err(error) => match error.as_service_error() {
                        Some(DeleteItemError::ConditionalCheckFailedException(failed)) => {
                            failed.item().cloned()
                        }
                        _ if is_condition_failure(&error) => None,
                        _ => {
                            return Err(map_dynamodb_error(
                                BACKEND,
                                "fenced DeleteItem",
                                &label,
                                error,
                            ));
                        }
                    },
                }
            }
        };
        self.refusal(&resource, fence, 0, refused, has_own_condition)
    }

    /// Applies every write, each under its fence, in one `TransactWriteItems`: all of them,
    /// or none. The writes are sent in the order given (DynamoDB runs a transaction as one
    /// step, so no order can deadlock). The first write (in that order) whose fence its item
    /// refuses makes the call [`Error::Stale`] for that item; a transaction refused only by
    /// a caller's condition is [`FenceOutcome::ConditionFailed`] naming the first such write.
    /// Either way nothing was written.
    ///
    /// Refused before any I/O with [`Error::InvalidConfig`]: two writes of one item (same
    /// table and key; DynamoDB allows one action per item in a transaction), more than
    /// [`MAX_TRANSACT_WRITES`] writes, a write asking for
    /// [`return_values`](FencedWrite::return_values), and every check of [`FencedWrite`].
    /// No writes at all is `Ok(FenceOutcome::Written)` without a request.
    ///
    /// A transaction that met another on one of its items is [`Error::Conflict`] (retryable,
    /// nothing written).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the request in flight: it lands (whole) or not as if the
    /// call had returned [`Error::Unavailable`].
    pub async fn transact(
        &self,
        writes: impl IntoIterator<Item = (FencedWrite, Fence)>,
    ) -> Result<FenceOutcome> {
        let writes: Vec<(FencedWrite, Fence)> = writes.into_iter().collect();
        if writes.len() > MAX_TRANSACT_WRITES {
            return Err(Error::config(format!(
                "a fenced transaction of {} writes: DynamoDB takes at most {MAX_TRANSACT_WRITES}",
                writes.len()
            )));
        }
        let mut seen = HashSet::new();
        for (write, _) in &writes {
            write.check(&self.token, &self.owner)?;
            if write.return_values.is_some() {
                return Err(Error::config(format!(
                    "fenced transaction: the write of {} asks for return values, which a \
                     transaction does not return",
                    write.resource()
                )));
            }
            if !seen.insert(write.resource()) {
                return Err(Error::config(format!(
                    "fenced transaction: two writes of {}; DynamoDB allows one action per item \
                     in a transaction: make them one write",
                    write.resource()
                )));
            }
        }
        if writes.is_empty() {
            return Ok(FenceOutcome::Written(Item::new()));
        }
        let resources: Vec<(String, Fence, bool)> = writes
            .iter()
            .map(|(w, f)| (w.resource(), *f, w.condition.is_some()))
            .collect();
        let tables: Vec<String> = writes.iter().map(|(w, _)| w.table.clone()).collect();
        let mut request = self
            .client
            .transact_write_items()
            // DynamoDB applies a transaction with a token once, however often the SDK sends it.
            .client_request_token(new_version());
        for (write, fence) in writes {
            request = request.transact_items(self.transact_item(write, fence)?);
        }
        let error = match request.send().await {
            Ok(_) => return Ok(FenceOutcome::Written(Item::new())),
            Err(error) => error,
        };
        let label = match tables.as_slice() {
            [one] => format!("table {one:?}"),
            _ => format!("tables {:?}", tables.iter().collect::<HashSet<_>>()),
        };
        let reasons = match error.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
                cancelled.cancellation_reasons().to_vec()
            }
            _ => {
                return Err(map_dynamodb_error(
                    BACKEND,
                    "fenced TransactWriteItems",
                    &label,
                    error,
                ));
            }
        };
        let failed: Vec<(usize, Option<Item>)> = reasons
            .iter()
            .enumerate()
            .filter(|(_, r)| r.code() == Some("ConditionalCheckFailed"))
            .map(|(i, r)| (i, r.item().cloned()))
            .collect();
        for (index, item) in &failed {
            let Some((resource, fence, _)) = resources.get(*index) else {
                return Err(protocol(
                    &label,
                    "a cancellation reason past the last write",
                ));
            };
            let current = item
                .as_ref()
                .map(|i| self.fence_of(i))
                .transpose()?
                .flatten();
            self.rule.check(resource, current, *fence)?;
        }
        if let Some((index, item)) = failed.into_iter().next() {
            let own = resources.get(index).is_some_and(|(_, _, own)| *own);
            return self.refusal(&resources[index].0, resources[index].1, index, item, own);
        }
        let codes: Vec<&str> = reasons.iter().filter_map(|r| r.code()).collect();
        if codes.contains(&"TransactionConflict") {
            return Err(Error::Conflict {
                backend: BACKEND,
                message: format!(
                    "fenced TransactWriteItems on {label}: another transaction was writing one \
                     of its items (reasons {codes:?}); nothing was written"
                ),
                source: Some(Box::new(error)),
            });
        }
        Err(map_dynamodb_error(
            BACKEND,
            "fenced TransactWriteItems",
            &label,
            error,
        ))
    }

    fn strict(&self) -> bool {
        self.rule == FenceRule::Strict
    }

    /// The write's placeholders and the fence's.
    fn placeholders(
        &self,
        write: &FencedWrite,
        fence: Fence,
    ) -> (std::collections::HashMap<String, String>, Item) {
        let mut names = write.names.clone();
        names.insert(TOKEN_NAME.to_owned(), self.token.clone());
        names.insert(OWNER_NAME.to_owned(), self.owner.clone());
        let mut values = write.values.clone();
        values.insert(TOKEN_VALUE.to_owned(), number(fence.token.get()));
        values.insert(OWNER_VALUE.to_owned(), text(fence.owner.to_string()));
        (names, values)
    }

    /// One write as an action of a transaction.
    fn transact_item(&self, write: FencedWrite, fence: Fence) -> Result<TransactWriteItem> {
        let condition = combined_condition(self.strict(), write.condition.as_deref());
        let (names, values) = self.placeholders(&write, fence);
        let resource = write.resource();
        let built = |e: aws_sdk_dynamodb::error::BuildError| {
            Error::config(format!("fenced transaction: the write of {resource}: {e}"))
        };
        let old = ReturnValuesOnConditionCheckFailure::AllOld;
        let item = match write.action {
            Action::Put(attributes) => {
                let mut item = attributes;
                item.extend(write.key);
                item.insert(self.token.clone(), number(fence.token.get()));
                item.insert(self.owner.clone(), text(fence.owner.to_string()));
                TransactWriteItem::builder().put(
                    Put::builder()
                        .table_name(write.table)
                        .set_item(Some(item))
                        .condition_expression(condition)
                        .set_expression_attribute_names(Some(names))
                        .set_expression_attribute_values(Some(values))
                        .return_values_on_condition_check_failure(old)
                        .build()
                        .map_err(built)?,
                )
            }
            Action::Update(expression) => TransactWriteItem::builder().update(
                Update::builder()
                    .table_name(write.table)
                    .set_key(Some(write.key))
                    .update_expression(with_fence_set(&expression))
                    .condition_expression(condition)
                    .set_expression_attribute_names(Some(names))
                    .set_expression_attribute_values(Some(values))
                    .return_values_on_condition_check_failure(old)
                    .build()
                    .map_err(built)?,
            ),
            Action::Delete => TransactWriteItem::builder().delete(
                Delete::builder()
                    .table_name(write.table)
                    .set_key(Some(write.key))
                    .condition_expression(condition)
                    .set_expression_attribute_names(Some(names))
                    .set_expression_attribute_values(Some(values))
                    .return_values_on_condition_check_failure(old)
                    .build()
                    .map_err(built)?,
            ),
        };
        Ok(item.build())
    }

    /// What a failed condition means: [`Error::Stale`] when the item's fence refuses
    /// `presented`, else the caller's own condition failed.
    fn refusal(
        &self,
        resource: &str,
        presented: Fence,
        index: usize,
        item: Option<Item>,
        has_own_condition: bool,
    ) -> Result<FenceOutcome> {
        let current = item
            .as_ref()
            .map(|i| self.fence_of(i))
            .transpose()?
            .flatten();
        self.rule.check(resource, current, presented)?;
        if has_own_condition {
            Ok(FenceOutcome::ConditionFailed { index, item })
        } else {
            Err(protocol(
                resource,
                "the fence's condition failed on an item whose fence admits the write",
            ))
        }
    }
}

/// A failed condition the SDK did not model as its own variant.
fn is_condition_failure<E: ProvideErrorMetadata>(error: &E) -> bool {
    error.code() == Some("ConditionalCheckFailedException")
}
