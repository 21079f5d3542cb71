//! Reading and writing the attributes of an item.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::AttributeValue;
use fencelock_core::{Error, OwnerId, Result};

use crate::error::protocol;
use crate::table::Shared;

/// An item's attributes, as the SDK gives and takes them.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// A number attribute.
pub(crate) fn number(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A string attribute.
pub(crate) fn text(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// The number attribute `name` of `item`, `None` when it is absent; an attribute of another
/// type, or a number that is not a `u64`, is a protocol error naming the table.
pub(crate) fn get_number(shared: &Shared, item: &Item, name: &str) -> Result<Option<u64>> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(n)) => n
            .parse::<u64>()
            .map(Some)
            .map_err(|_| protocol(&shared.label, &format!("attribute `{name}` holds {n:?}"))),
        Some(_) => Err(protocol(
            &shared.label,
            &format!("attribute `{name}` is not a number"),
        )),
    }
}

/// The string attribute `name` of `item`, `None` when it is absent.
pub(crate) fn get_text<'a>(shared: &Shared, item: &'a Item, name: &str) -> Result<Option<&'a str>> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::S(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(protocol(
            &shared.label,
            &format!("attribute `{name}` is not a string"),
        )),
    }
}

/// The owner attribute `name` of `item` (32 hex digits), `None` when it is absent.
pub(crate) fn get_owner(shared: &Shared, item: &Item, name: &str) -> Result<Option<OwnerId>> {
    get_text(shared, item, name)?
        .map(|s| {
            s.parse::<OwnerId>().map_err(|_| {
                protocol(
                    &shared.label,
                    &format!("attribute `{name}` is not an owner id"),
                )
            })
        })
        .transpose()
}

/// A fresh record version: 128 random bits from the thread-local CSPRNG, as 32 hex digits.
/// Two writes never draw the same one, so a version names one write.
pub(crate) fn new_version() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// What a conditional write came to.
#[derive(Debug)]
pub(crate) enum Written {
    /// Applied; the attributes the request asked back (`ReturnValues`).
    Applied(Item),
    /// The condition failed; the item as it was (`ReturnValuesOnConditionCheckFailure =
    /// ALL_OLD`), `None` when there was none.
    Refused(Option<Item>),
}

/// Sends a conditional `UpdateItem`, telling a failed condition (with the item it returns)
/// apart from an error, which is mapped naming `what`.
pub(crate) async fn update(
    shared: &Shared,
    what: &str,
    request: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
) -> Result<Written> {
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    match request.send().await {
        Ok(output) => Ok(Written::Applied(output.attributes.unwrap_or_default())),
        Err(error) => match error.as_service_error() {
            Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                Ok(Written::Refused(failed.item().cloned()))
            }
            _ if error.code() == Some("ConditionalCheckFailedException") => {
                Ok(Written::Refused(None))
            }
            _ => Err(shared.error(what, error)),
        },
    }
}

/// An error that is not the backend's: used where a request cannot even be built.
pub(crate) fn build_error(
    shared: &Shared,
    what: &str,
    error: aws_sdk_dynamodb::error::BuildError,
) -> Error {
    Error::Backend {
        backend: crate::error::BACKEND,
        message: format!("building {what} for {}: {error}", shared.label),
        source: None,
    }
}
