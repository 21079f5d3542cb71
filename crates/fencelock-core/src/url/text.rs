//! User names, passwords and database names as URLs write them.

use percent_encoding::percent_decode_str;

use crate::error::{Error, Result};

/// `raw`, a user name, password or database name as a URL writes it (percent-encoded),
/// decoded; `what` names it in messages (`user name`, `password`, `database name`).
///
/// Refused with [`Error::InvalidConfig`], never quoting the text: a NUL (`%00`), which the
/// wire protocols end these strings with (one inside cuts the string short, and the server
/// reads the rest as the next field); text that is not UTF-8 once percent-decoded, which a
/// lenient decoding would change into something the user did not write.
///
/// ```
/// use fencelock_core::url::decode_part;
/// assert_eq!(decode_part("user name", "app%40x")?, "app@x");
/// assert!(decode_part("user name", "ro%00ot").is_err());
/// assert!(decode_part("password", "pw%ff").is_err());
/// # Ok::<(), fencelock_core::Error>(())
/// ```
pub fn decode_part(what: &str, raw: &str) -> Result<String> {
    let text = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| Error::config(format!("the {what} is not UTF-8 once percent-decoded")))?;
    if text.contains('\0') {
        return Err(Error::config(format!(
            "the {what} holds a NUL character (%00)"
        )));
    }
    Ok(text.into_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn refuses_nul_and_non_utf8_without_quoting() {
        assert_eq!(decode_part("user name", "").unwrap(), "");
        assert_eq!(decode_part("password", "p%3Aw%C3%BC").unwrap(), "p:wü");
        for (raw, expected) in [
            ("s3cret%00", "the password holds a NUL character"),
            ("s3cret\0", "the password holds a NUL character"),
            ("s3cret%ff", "the password is not UTF-8"),
        ] {
            let message = decode_part("password", raw).unwrap_err().to_string();
            assert!(message.contains(expected), "{raw:?}: {message}");
            assert!(!message.contains("s3cret"), "{message}");
        }
    }
}
