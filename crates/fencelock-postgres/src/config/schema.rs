//! Schema names.

use fencelock_core::{Error, Result};

use super::MAX_SCHEMA_LEN;

/// Checks a schema name: `[a-z_][a-z0-9_]*`, at most [`MAX_SCHEMA_LEN`] bytes.
pub(crate) fn validate_schema(schema: &str) -> Result<()> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || schema.len() > MAX_SCHEMA_LEN {
        return Err(Error::config(format!(
            "invalid schema name {schema:?}: use lowercase ASCII letters, digits and `_`, \
             not starting with a digit, at most {MAX_SCHEMA_LEN} bytes"
        )));
    }
    Ok(())
}
