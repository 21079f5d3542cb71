//! The commands a fenced batch may hold: how each is checked, sent and answered.

use std::time::Duration;

use fencelock_core::{Error, LockKey, Result, validate_value};
use redis::Value;

use crate::codec::ttl_millis;
use crate::error::{REDIS, protocol};
use crate::keys::KeySpace;
use crate::slot::slot;

/// The longest expiry a batch may set: 10^15 ms (about 31,700 years); the script refuses
/// longer ones, which could overflow the server's clock arithmetic.
const MAX_EXPIRY_MILLIS: u64 = 999_999_999_999_999;

/// One command of a fenced batch, as the user gave it; checked when the batch is sent.
#[derive(Clone)]
pub(crate) enum Command {
    Set {
        key: String,
        value: Vec<u8>,
        px: Option<Duration>,
    },
    HSet {
        key: String,
        field: Vec<u8>,
        value: Vec<u8>,
    },
    Del {
        key: String,
    },
    IncrBy {
        key: String,
        by: i64,
    },
    PExpire {
        key: String,
        ttl: Duration,
    },
    Get {
        key: String,
    },
    HGetAll {
        key: String,
    },
}

/// What one command of a batch answered, in the order of the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// `SET`: the value is stored.
    Stored,
    /// `HSET`: the number of fields added (0 when the field was overwritten); `DEL`: the
    /// number of keys removed; `INCRBY`: the value afterwards; `PEXPIRE`: 1 when the expiry
    /// was set, 0 when the key does not exist.
    Int(i64),
    /// `GET`: the value, `None` when the key does not exist.
    Value(Option<Vec<u8>>),
    /// `HGETALL`: the hash's fields and values (empty when the key does not exist).
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
}

impl Command {
    pub(crate) fn key(&self) -> &str {
        match self {
            Command::Set { key, .. }
            | Command::HSet { key, .. }
            | Command::Del { key }
            | Command::IncrBy { key, .. }
            | Command::PExpire { key, .. }
            | Command::Get { key }
            | Command::HGetAll { key } => key,
        }
    }

    /// The command's name in the scripts.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Command::Set { .. } => "set",
            Command::HSet { .. } => "hset",
            Command::Del { .. } => "del",
            Command::IncrBy { .. } => "incrby",
            Command::PExpire { .. } => "pexpire",
            Command::Get { .. } => "get",
            Command::HGetAll { .. } => "hgetall",
        }
    }

    pub(crate) fn is_read(&self) -> bool {
        matches!(self, Command::Get { .. } | Command::HGetAll { .. })
    }

    /// Checks the command without the network: the key is a valid key name outside
    /// fencelock's own key space and in the hash slot `slot_of_record`; values fit in
    /// `max_value_len`; expiries are positive and not absurdly long.
    pub(crate) fn check(
        &self,
        keys: &KeySpace,
        slot_of_record: u16,
        max_value_len: usize,
    ) -> Result<()> {
        let key = self.key();
        LockKey::new(key)?;
        if keys.owns(key) {
            return Err(Error::InvalidKey {
                key: shorten(key),
                reason: "is in fencelock's own key space (it starts with the key prefix and `:`)",
            });
        }
        if slot(key.as_bytes()) != slot_of_record {
            return Err(Error::InvalidKey {
                key: shorten(key),
                reason: "is in another Redis Cluster hash slot than the resource's fence record; \
                         put the resource's hash tag (`fencelock_redis::hash_tag`) in its name",
            });
        }
        match self {
            Command::Set { value, px, .. } => {
                validate_value(value, max_value_len)?;
                if let Some(ttl) = px {
                    expiry_millis(*ttl)?;
                }
            }
            Command::HSet { field, value, .. } => {
                validate_value(field, max_value_len)?;
                validate_value(value, max_value_len)?;
            }
            Command::PExpire { ttl, .. } => {
                expiry_millis(*ttl)?;
            }
            Command::Del { .. }
            | Command::IncrBy { .. }
            | Command::Get { .. }
            | Command::HGetAll { .. } => {}
        }
        Ok(())
    }

    /// The command's name and arguments, as `fence_apply.lua` reads them.
    pub(crate) fn args(&self) -> Result<Vec<Vec<u8>>> {
        let name = self.name().as_bytes().to_vec();
        Ok(match self {
            Command::Set { value, px, .. } => {
                let px = match px {
                    Some(ttl) => expiry_millis(*ttl)?.to_string().into_bytes(),
                    None => Vec::new(),
                };
                vec![name, value.clone(), px]
            }
            Command::HSet { field, value, .. } => vec![name, field.clone(), value.clone()],
            Command::IncrBy { by, .. } => vec![name, by.to_string().into_bytes()],
            Command::PExpire { ttl, .. } => {
                vec![name, expiry_millis(*ttl)?.to_string().into_bytes()]
            }
            Command::Del { .. } | Command::Get { .. } | Command::HGetAll { .. } => vec![name],
        })
    }

    /// The command's answer, from the script's reply.
    pub(crate) fn decode(&self, value: Value) -> Result<Reply> {
        let unexpected = || {
            protocol(
                REDIS,
                format!("the fenced {} answered something unexpected", self.name()),
            )
        };
        match (self, value) {
            (Command::Set { .. }, Value::Okay) => Ok(Reply::Stored),
            (Command::Set { .. }, Value::SimpleString(s)) if s == "OK" => Ok(Reply::Stored),
            (
                Command::HSet { .. } | Command::Del { .. } | Command::PExpire { .. },
                Value::Int(n),
            ) => Ok(Reply::Int(n)),
            // The script reads the value back as a string (exact past 2^53).
            (Command::IncrBy { .. }, Value::BulkString(bytes)) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| text.parse::<i64>().ok())
                .map(Reply::Int)
                .ok_or_else(unexpected),
            (Command::Get { .. }, Value::Nil) => Ok(Reply::Value(None)),
            (Command::Get { .. }, Value::BulkString(bytes)) => Ok(Reply::Value(Some(bytes))),
            (Command::HGetAll { .. }, Value::Array(items)) => {
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let Some(field) = items.next() {
                    match (field, items.next()) {
                        (Value::BulkString(f), Some(Value::BulkString(v))) => pairs.push((f, v)),
                        _ => return Err(unexpected()),
                    }
                }
                Ok(Reply::Hash(pairs))
            }
            (Command::HGetAll { .. }, Value::Map(entries)) => entries
                .into_iter()
                .map(|entry| match entry {
                    (Value::BulkString(f), Value::BulkString(v)) => Ok((f, v)),
                    _ => Err(unexpected()),
                })
                .collect::<Result<_>>()
                .map(Reply::Hash),
            _ => Err(unexpected()),
        }
    }
}

/// `ttl` in whole milliseconds for an expiry: positive and at most [`MAX_EXPIRY_MILLIS`].
fn expiry_millis(ttl: Duration) -> Result<u64> {
    let millis = ttl_millis(ttl);
    if ttl.is_zero() {
        return Err(Error::InvalidTtl {
            ttl,
            reason: "an expiry must be positive (DEL removes a key)".to_owned(),
        });
    }
    if millis > MAX_EXPIRY_MILLIS {
        return Err(Error::InvalidTtl {
            ttl,
            reason: format!("an expiry is at most {MAX_EXPIRY_MILLIS} ms"),
        });
    }
    Ok(millis)
}

/// A key for an error message: at most 64 characters.
fn shorten(key: &str) -> String {
    match key.char_indices().nth(64) {
        Some((end, _)) => format!("{}...", &key[..end]),
        None => key.to_owned(),
    }
}
