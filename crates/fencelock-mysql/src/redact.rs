//! URLs in messages: with the password replaced by `***`, including URLs that do not parse.

use fencelock_core::Error;
use url::Url;

/// `url` for messages: the password replaced by `***`.
pub(crate) fn shown(url: &Url) -> String {
    let mut url = url.clone();
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    url.into()
}

/// A URL the `url` crate refused, as an error that names the problem without the password.
pub(crate) fn parse_error(url: &str, error: url::ParseError) -> Error {
    let shown = redact_raw(url);
    let message = match error {
        url::ParseError::InvalidPort => match raw_port(url) {
            Some(port) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                format!("MySQL URL {shown}: port {port} is out of range (1 to 65535)")
            }
            Some(port) => format!("MySQL URL {shown}: port {port:?} is not a number"),
            None => format!("MySQL URL {shown}: invalid port"),
        },
        url::ParseError::EmptyHost => format!("MySQL URL {shown} names no host"),
        other => format!("{shown} is not a valid MySQL URL: {other}"),
    };
    Error::InvalidConfig {
        message,
        source: Some(Box::new(error)),
    }
}

/// The authority of a raw URL (between `://` and the path, query or fragment).
fn raw_authority(url: &str) -> Option<(usize, &str)> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some((start, &rest[..end]))
}

/// The port text of a raw URL's authority, if it has one.
fn raw_port(url: &str) -> Option<&str> {
    let (_, authority) = raw_authority(url)?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let after_host = match host_port.rfind(']') {
        Some(end) => &host_port[end + 1..],
        None => host_port,
    };
    after_host.rsplit_once(':').map(|(_, port)| port)
}

/// A URL that may not parse, with whatever stands where a password would be replaced by
/// `***`.
pub(crate) fn redact_raw(url: &str) -> String {
    let Some((start, authority)) = raw_authority(url) else {
        return url.to_owned();
    };
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let Some((user, _password)) = userinfo.split_once(':') else {
        return url.to_owned();
    };
    format!(
        "{}{user}:***@{host}{}",
        &url[..start],
        &url[start + authority.len()..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_even_in_urls_that_do_not_parse() {
        assert_eq!(
            redact_raw("mysql://app:hunter2@db:99999/x"),
            "mysql://app:***@db:99999/x"
        );
        assert_eq!(redact_raw("mysql://app@db/x"), "mysql://app@db/x");
        assert_eq!(redact_raw("not a url"), "not a url");
        assert_eq!(raw_port("mysql://a:b@[::1]:70000/x"), Some("70000"));
        assert_eq!(raw_port("mysql://a@host/x"), None);
    }
}
