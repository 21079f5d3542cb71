//! `FencedWrite`: one `PutItem`, `UpdateItem` or `DeleteItem` on the caller's own table, as
//! the caller describes it with the SDK's own types.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use fencelock_core::{Error, Result};

use super::expression::{RESERVED, find_word};
use crate::item::Item;

/// What a [`FencedWrite`] does to its item.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// `PutItem` of the key's attributes and these.
    Put(Item),
    /// `UpdateItem` with this update expression (may be empty: the fence alone is set).
    Update(String),
    /// `DeleteItem`.
    Delete,
}

/// One write on an item of the caller's own table, to be applied under a fence by
/// [`DynamoFence::write`](super::DynamoFence::write) or, with others, by
/// [`DynamoFence::transact`](super::DynamoFence::transact).
///
/// It is built from what the SDK's own requests take: the item's key and attributes as
/// [`AttributeValue`] maps, an update expression, and optionally a condition of the caller's
/// own with its placeholders ([`name`](Self::name), [`value`](Self::value)). The fence adds
/// its attributes and its condition when the write is sent; the caller names neither.
///
/// Checked before anything is sent (each an [`Error::InvalidConfig`] naming the problem): the
/// key is not empty, a put's attributes do not repeat a key attribute, nothing the caller
/// gives names the fence's attributes (an attribute, a placeholder's name, a word of an
/// expression) or uses a placeholder starting with `#fencelock_` or `:fencelock_`.
#[derive(Debug, Clone, PartialEq)]
pub struct FencedWrite {
    pub(crate) table: String,
    pub(crate) key: Item,
    pub(crate) action: Action,
    pub(crate) condition: Option<String>,
    pub(crate) names: HashMap<String, String>,
    pub(crate) values: Item,
    pub(crate) return_values: Option<ReturnValue>,
}

impl FencedWrite {
    fn new(table: impl Into<String>, key: Item, action: Action) -> Self {
        FencedWrite {
            table: table.into(),
            key,
            action,
            condition: None,
            names: HashMap::new(),
            values: HashMap::new(),
            return_values: None,
        }
    }

    /// A `PutItem` of the item whose key is `key` (the table's partition key, and its sort
    /// key if it has one) and whose other attributes are `attributes`; it replaces the whole
    /// item, and the fence's attributes are added to it.
    pub fn put(table: impl Into<String>, key: Item, attributes: Item) -> Self {
        FencedWrite::new(table, key, Action::Put(attributes))
    }

    /// An `UpdateItem` of the item whose key is `key`, by `expression` (DynamoDB's update
    /// expression: `SET #b = #b - :d REMOVE #hold`, its placeholders given with
    /// [`name`](Self::name) and [`value`](Self::value)). The fence's assignments join its
    /// `SET` clause. An empty expression sets the fence alone: with
    /// [`return_values`](Self::return_values)`(ReturnValue::AllNew)` that is a fenced read,
    /// which a holder with an older token cannot write after.
    pub fn update(table: impl Into<String>, key: Item, expression: impl Into<String>) -> Self {
        FencedWrite::new(table, key, Action::Update(expression.into()))
    }

    /// A `DeleteItem` of the item whose key is `key`. The item's fence goes with it: the next
    /// write of that key is admitted whatever its fence, a superseded holder's included. Where
    /// that matters, keep the item and [`update`](Self::update) its data away (`REMOVE ..`)
    /// instead, so its fence stays.
    pub fn delete(table: impl Into<String>, key: Item) -> Self {
        FencedWrite::new(table, key, Action::Delete)
    }

    /// A condition of the caller's own (DynamoDB's condition expression), which must hold as
    /// well as the fence's. When only it fails, nothing is written and the outcome is
    /// [`FenceOutcome::ConditionFailed`](super::FenceOutcome::ConditionFailed), not an error.
    pub fn condition(mut self, expression: impl Into<String>) -> Self {
        self.condition = Some(expression.into());
        self
    }

    /// An attribute name placeholder (`#balance` for `balance`) of the caller's expressions.
    pub fn name(mut self, placeholder: impl Into<String>, attribute: impl Into<String>) -> Self {
        self.names.insert(placeholder.into(), attribute.into());
        self
    }

    /// A value placeholder (`:debit`) of the caller's expressions.
    pub fn value(mut self, placeholder: impl Into<String>, value: AttributeValue) -> Self {
        self.values.insert(placeholder.into(), value);
        self
    }

    /// The attributes a single write returns when it is admitted (`ReturnValues`; none by
    /// default). Not for a transaction's writes: DynamoDB returns nothing from those, and
    /// [`DynamoFence::transact`](super::DynamoFence::transact) refuses one that asks.
    pub fn return_values(mut self, values: ReturnValue) -> Self {
        self.return_values = Some(values);
        self
    }

    /// The table and key, as errors name the item: `orders {id: "42"}`.
    pub(crate) fn resource(&self) -> String {
        let sorted: BTreeMap<&String, &AttributeValue> = self.key.iter().collect();
        let mut shown = format!("{} {{", self.table);
        for (i, (name, value)) in sorted.into_iter().enumerate() {
            let separator = if i == 0 { "" } else { ", " };
            let _ = write!(shown, "{separator}{name}: {}", show_value(value));
        }
        shown.push('}');
        shown
    }

    /// The checks listed on the type, against the fence's attribute names.
    pub(crate) fn check(&self, token: &str, owner: &str) -> Result<()> {
        let fail = |what: String| {
            Err(Error::config(format!(
                "fenced write of {}: {what}",
                self.resource()
            )))
        };
        if self.table.is_empty() {
            return fail("no table named".to_owned());
        }
        if self.key.is_empty() {
            return fail("an empty key".to_owned());
        }
        let fence_names = [token, owner];
        let mut attributes: Vec<&String> = self.key.keys().collect();
        if let Action::Put(item) = &self.action {
            if let Some(repeated) = item.keys().find(|name| self.key.contains_key(*name)) {
                return fail(format!(
                    "the key attribute `{repeated}` is repeated in the put's attributes"
                ));
            }
            attributes.extend(item.keys());
        }
        if let Some(name) = attributes
            .iter()
            .find(|n| fence_names.contains(&n.as_str()))
        {
            return fail(format!(
                "the attribute `{name}` is the fence's own: fencelock sets it"
            ));
        }
        if let Some((placeholder, name)) = self
            .names
            .iter()
            .find(|(_, name)| fence_names.contains(&name.as_str()))
        {
            return fail(format!(
                "the placeholder `{placeholder}` names the fence's attribute `{name}`, which \
                 only fencelock writes"
            ));
        }
        let placeholders = self.names.keys().chain(self.values.keys());
        let expressions = [self.update_expression(), self.condition.as_deref()];
        for text in placeholders
            .map(String::as_str)
            .chain(expressions.into_iter().flatten())
        {
            if let Some(reserved) = RESERVED.iter().find(|r| text.contains(*r)) {
                return fail(format!(
                    "placeholders starting with `{reserved}` are fencelock's (found in {text:?})"
                ));
            }
        }
        for expression in expressions.into_iter().flatten() {
            if let Some(name) = fence_names
                .iter()
                .find(|name| find_word(expression, name).is_some())
            {
                return fail(format!(
                    "the expression {expression:?} names the fence's attribute `{name}`, which \
                     only fencelock writes"
                ));
            }
        }
        Ok(())
    }

    fn update_expression(&self) -> Option<&str> {
        match &self.action {
            Action::Update(expression) => Some(expression),
            _ => None,
        }
    }
}

/// A key attribute's value as errors show it.
fn show_value(value: &AttributeValue) -> String {
    match value {
        AttributeValue::S(s) => format!("{s:?}"),
        AttributeValue::N(n) => n.clone(),
        AttributeValue::B(b) => format!("<{} bytes>", b.as_ref().len()),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(id: &str) -> Item {
        HashMap::from([("id".to_owned(), AttributeValue::S(id.to_owned()))])
    }

    fn refused(write: FencedWrite) -> String {
        match write.check("fencelock_token", "fencelock_owner") {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn a_write_naming_the_fence_is_refused_before_it_is_sent() {
        let token = || AttributeValue::N("9".to_owned());
        let put = FencedWrite::put(
            "orders",
            key("1"),
            HashMap::from([("fencelock_token".to_owned(), token())]),
        );
        assert!(refused(put).contains("`fencelock_token` is the fence's own"));
        let named = FencedWrite::update("orders", key("1"), "SET #t = :t")
            .name("#t", "fencelock_owner")
            .value(":t", token());
        assert!(refused(named).contains("names the fence's attribute"));
        let literal = FencedWrite::update("orders", key("1"), "SET fencelock_token = :t");
        assert!(refused(literal).contains("names the fence's attribute"));
        let reserved = FencedWrite::delete("orders", key("1")).condition(":fencelock_token > :x");
        assert!(refused(reserved).contains("`:fencelock_`"));
        let repeated = FencedWrite::put("orders", key("1"), key("2"));
        assert!(refused(repeated).contains("`id` is repeated"));
        assert!(refused(FencedWrite::delete("orders", HashMap::new())).contains("empty key"));
    }

    #[test]
    fn an_item_is_named_by_its_table_and_key() {
        let mut key = key("42");
        key.insert("n".to_owned(), AttributeValue::N("7".to_owned()));
        assert_eq!(
            FencedWrite::delete("orders", key).resource(),
            r#"orders {id: "42", n: 7}"#
        );
        let fine = FencedWrite::update("orders", self::key("1"), "SET #s = :s")
            .name("#s", "status")
            .value(":s", AttributeValue::S("paid".to_owned()));
        fine.check("fencelock_token", "fencelock_owner").unwrap();
    }
}
