//! `redis://` URLs: parsed and checked completely, kept in their parts, rendered back with or
//! without the password, and every problem worded for the user (never quoting a password).

use std::path::PathBuf;

use fencelock_core::url::{Known, Options, decode_part, port_problem};
use fencelock_core::{Error, HostPort};
use url::Url;

use crate::options::{ALLOW_EVICTION, PREFIX, UrlOptions};

use fencelock_core::url::{redact, safe_to_echo};

/// The options a `redis://` URL takes: the shared ones, and `tls_ca`.
const KNOWN_OPTIONS: &[Known] = &[ALLOW_EVICTION, PREFIX, Known::new("tls_ca")];

/// The port a URL without one means.
pub(crate) const DEFAULT_PORT: u16 = 6379;

/// A checked `redis://` URL, in its parts. User name and password are kept percent-encoded,
/// as the URL writes them, so rendering them back gives the same URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    tls: bool,
    username: String,
    password: Option<String>,
    /// As the URL writes it: an IPv6 address in brackets.
    host: String,
    port: u16,
    db: Option<u32>,
}

impl Endpoint {
    /// Whether the password would cross to a server off this machine in the clear
    /// (`redis://`; `rediss://` checks the server's certificate and host).
    pub(crate) fn password_exposed(&self) -> bool {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        fencelock_core::password_exposed(self.password.is_some(), host, self.tls)
    }

    /// The URL, with the password as given or as `***`.
    pub(crate) fn render(&self, redacted: bool) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!(
            "{scheme}://{}{}:{}{}",
            self.userinfo(redacted),
            self.host,
            self.port,
            self.db.map(|db| format!("/{db}")).unwrap_or_default()
        )
    }

    /// `user[:password]@`, or nothing when the URL has no credentials.
    pub(crate) fn userinfo(&self, redacted: bool) -> String {
        match (&self.password, redacted) {
            (Some(_), true) => format!("{}:***@", self.username),
            (Some(password), false) => format!("{}:{password}@", self.username),
            (None, _) if self.username.is_empty() => String::new(),
            (None, _) => format!("{}@", self.username),
        }
    }

    /// The server's address, host without brackets.
    pub(crate) fn host_port(&self) -> HostPort {
        HostPort::new(self.host.trim_matches(['[', ']']), self.port)
    }

    /// `host:port` as the URL writes it (an IPv6 address in brackets).
    pub(crate) fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// Points this endpoint at `other`'s host and port; everything else stays.
    pub(crate) fn move_to(&mut self, other: Endpoint) {
        self.host = other.host;
        self.port = other.port;
    }

    /// Whether the server is reached over TLS (`rediss://`).
    pub(crate) fn is_tls(&self) -> bool {
        self.tls
    }

    /// `/db`, or nothing.
    pub(crate) fn path(&self) -> String {
        self.db.map(|db| format!("/{db}")).unwrap_or_default()
    }
}

/// What is wrong with a URL, worded to follow "redis URL <url>: ".
pub(crate) struct Problem {
    pub(crate) what: String,
    pub(crate) source: Option<url::ParseError>,
}

impl Problem {
    pub(crate) fn new(what: impl Into<String>) -> Self {
        Problem {
            what: what.into(),
            source: None,
        }
    }

    /// The message of a core refusal (an [`Error::InvalidConfig`]) as a problem.
    pub(crate) fn from_error(error: Error) -> Self {
        match error {
            Error::InvalidConfig { message, .. } => Problem::new(message),
            other => Problem::new(other.to_string()),
        }
    }

    /// The error for `kind` URL `input`, shown redacted.
    pub(crate) fn into_error(self, kind: &str, input: &str) -> Error {
        Error::InvalidConfig {
            message: format!("{kind} URL {:?}: {}", redact(input), self.what),
            source: self.source.map(|e| Box::new(e) as _),
        }
    }
}

/// Parses and checks a `redis://` or `rediss://` URL completely: where the server is, and
/// the URL's options.
pub(crate) fn parse_endpoint(
    input: &str,
) -> std::result::Result<(Endpoint, EndpointOptions), Problem> {
    let url = Url::parse(input).map_err(|e| unparsable(input, e))?;
    let tls = match url.scheme() {
        "redis" => false,
        "rediss" if cfg!(feature = "tls") => true,
        "rediss" => {
            return Err(Problem::new(
                "rediss:// (TLS) needs the `tls` feature of fencelock-redis",
            ));
        }
        other => {
            return Err(Problem::new(format!(
                "scheme `{other}` is not redis:// or rediss://"
            )));
        }
    };
    let host = url.host_str().unwrap_or_default();
    if host.is_empty() {
        return Err(Problem::new("names no host"));
    }
    let port = url.port().unwrap_or(DEFAULT_PORT);
    if port == 0 {
        return Err(Problem::new("port 0 is out of range (1 to 65535)"));
    }
    let db = match url.path() {
        "" | "/" => None,
        path => {
            let digits = &path[1..];
            let db = (digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| digits.parse::<u32>().ok())
                .flatten();
            match db {
                Some(db) => Some(db),
                None if safe_to_echo(input) => {
                    return Err(Problem::new(format!(
                        "the path `{path}` is not a database number (like /0)"
                    )));
                }
                None => {
                    return Err(Problem::new(
                        "the path is not a database number (like /0); a password holding \
                         `/`, `?` or `#` must be percent-encoded",
                    ));
                }
            }
        }
    };
    if url.fragment().is_some() {
        return Err(Problem::new("takes no fragment"));
    }
    let query = url.query().unwrap_or_default();
    if !query.is_empty() && !safe_to_echo(input) {
        return Err(Problem::new(
            "takes only the options `allow_eviction`, `prefix` and `tls_ca`; a password \
             holding `/`, `?` or `#` must be percent-encoded",
        ));
    }
    let given = Options::parse(query, KNOWN_OPTIONS).map_err(Problem::from_error)?;
    let mut options = EndpointOptions {
        shared: UrlOptions::read(&given).map_err(Problem::from_error)?,
        tls_ca: None,
    };
    match given.get("tls_ca") {
        Some(_) if !tls => {
            return Err(Problem::new("option `tls_ca` needs a rediss:// (TLS) URL"));
        }
        Some("") => {
            return Err(Problem::new(
                "option `tls_ca` is empty (it names a PEM file of CA certificates)",
            ));
        }
        Some(path) => options.tls_ca = Some(PathBuf::from(path)),
        None => {}
    }
    // The server reads these as given: a NUL or text that is not UTF-8 is refused now
    // rather than sent (or mangled by the driver's lenient decoding).
    decode_part("user name", url.username()).map_err(Problem::from_error)?;
    if let Some(password) = url.password() {
        decode_part("password", password).map_err(Problem::from_error)?;
    }
    let endpoint = Endpoint {
        tls,
        username: url.username().to_owned(),
        password: url.password().map(str::to_owned),
        host: host.to_owned(),
        port,
        db,
    };
    Ok((endpoint, options))
}

/// The options a `redis://` URL may carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EndpointOptions {
    /// `allow_eviction` and `prefix`, as every Redis scheme reads them.
    pub(crate) shared: UrlOptions,
    /// `tls_ca=/path/ca.pem` (rediss:// only): the CA certificates to trust instead of the
    /// webpki roots.
    pub(crate) tls_ca: Option<PathBuf>,
}

/// Says what the `url` crate refused, in the user's terms: an empty host and a port out of
/// range are named as such.
fn unparsable(input: &str, e: url::ParseError) -> Problem {
    let what = match e {
        url::ParseError::EmptyHost => "names no host".to_owned(),
        url::ParseError::InvalidPort => port_problem(input),
        url::ParseError::RelativeUrlWithoutBase => {
            "is not a URL (expected redis://host[:port][/db])".to_owned()
        }
        other => format!("is not a URL: {other}"),
    };
    Problem {
        what,
        source: Some(e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_password_in_the_clear_to_a_remote_server_is_flagged() {
        let exposed = |url: &str| parse_endpoint(url).ok().unwrap().0.password_exposed();
        assert!(exposed("redis://:pw@cache.example:6379"));
        assert!(exposed("redis://app:pw@10.1.2.3"));
        assert!(!exposed("redis://:pw@127.0.0.1:6379"));
        assert!(!exposed("redis://:pw@[::1]:6379"));
        assert!(!exposed("rediss://:pw@cache.example:6380"));
        assert!(!exposed("redis://cache.example:6379"));
    }
}
