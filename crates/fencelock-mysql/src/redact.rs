//! URLs in messages: with the password replaced by `***`, including URLs that do not parse,
//! by the one rule of [`fencelock_core::url`].

use fencelock_core::Error;
use fencelock_core::url::{port_problem, redact};
use url::Url;

/// `url` for messages: the password replaced by `***`.
pub(crate) fn shown(url: &Url) -> String {
    redact(url.as_str())
}

/// A URL the `url` crate refused, as an error that names the problem without the password.
pub(crate) fn parse_error(url: &str, error: url::ParseError) -> Error {
    let shown = redact(url);
    let message = match error {
        url::ParseError::InvalidPort => format!("MySQL URL {shown}: {}", port_problem(url)),
        url::ParseError::EmptyHost => format!("MySQL URL {shown} names no host"),
        other => format!("{shown} is not a valid MySQL URL: {other}"),
    };
    Error::InvalidConfig {
        message,
        source: Some(Box::new(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_even_in_urls_that_do_not_parse() {
        assert_eq!(
            redact("mysql://app:hunter2@db:99999/x"),
            "mysql://app:***@db:99999/x"
        );
        assert_eq!(redact("mysql://app@db/x"), "mysql://app@db/x");
        assert_eq!(redact("not a url"), "not a url");
        let Error::InvalidConfig { message, .. } = parse_error(
            "mysql://a:hunter2@[::1]:70000/x",
            url::ParseError::InvalidPort,
        ) else {
            unreachable!()
        };
        assert!(message.contains("port 70000 is out of range"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }
}
