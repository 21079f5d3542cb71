//! `host[:port]` lists: a default port, IPv6 in brackets, the same server refused twice.

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::host::HostPort;
use crate::url::safe_to_echo;

/// One `host[:port]` (an IPv6 address in brackets), the port `default_port` when none is
/// written. The host is checked and normalized as a URL's host is (a name in lower case,
/// `127.1` as `127.0.0.1`, an IPv6 address without brackets in the result).
///
/// Pass only the host part: the caller has split off any credentials, and quotes `text` in
/// messages only when [`safe_to_echo`] says the URL allows it. Refusals are
/// [`Error::InvalidConfig`]: `names no host`, `port 0 is out of range (1 to 65535)`, a port
/// that is not a number, a host that is not a host name or address.
///
/// ```
/// use fencelock_core::{HostPort, url::parse_host};
/// assert_eq!(parse_host("[::1]:7000", 2379)?, HostPort::new("::1", 7000));
/// assert_eq!(parse_host("Etcd.Example", 2379)?, HostPort::new("etcd.example", 2379));
/// # Ok::<(), fencelock_core::Error>(())
/// ```
pub fn parse_host(text: &str, default_port: u16) -> Result<HostPort> {
    if text.is_empty() {
        return Err(Error::config("names no host"));
    }
    let (host, port) = match text.strip_prefix('[') {
        Some(bracketed) => {
            let Some((address, after)) = bracketed.split_once(']') else {
                return Err(Error::config(format!(
                    "`{text}` is not host[:port]: the IPv6 address lacks its `]`"
                )));
            };
            match after {
                "" => (format!("[{address}]"), None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (format!("[{address}]"), Some(port)),
                    None => return Err(Error::config(format!("`{text}` is not host[:port]"))),
                },
            }
        }
        None => match text.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Err(Error::config(format!(
                    "`{text}` is not host[:port] (an IPv6 address goes in brackets: [::1]:port)"
                )));
            }
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (text.to_owned(), None),
        },
    };
    if host.is_empty() {
        return Err(Error::config("names no host"));
    }
    let port = match port {
        None | Some("") => default_port,
        Some(port) => parse_port(port)?,
    };
    let host = match url::Host::parse(&host) {
        Ok(url::Host::Domain(name)) if !name.is_empty() => name,
        Ok(url::Host::Domain(_)) | Err(url::ParseError::EmptyHost) => {
            return Err(Error::config("names no host"));
        }
        Ok(url::Host::Ipv4(address)) => address.to_string(),
        Ok(url::Host::Ipv6(address)) => address.to_string(),
        Err(e) => {
            return Err(Error::InvalidConfig {
                message: format!("`{text}` is not host[:port]: {e}"),
                source: Some(Box::new(e)),
            });
        }
    };
    Ok(HostPort::new(host, port))
}

/// A comma-separated list of `host[:port]` (see [`parse_host`]), each entry called `what`
/// (`member`, `node`) in messages: `member 2 of 3 names no host`, `member h:2379 is listed
/// twice (...)`. The same server twice is refused (see [`distinct`]); so is an empty list.
///
/// ```
/// use fencelock_core::{HostPort, url::parse_hosts};
/// let hosts = parse_hosts("a,b:2380,[::1]", 2379, "member")?;
/// assert_eq!(hosts[1], HostPort::new("b", 2380));
/// assert!(parse_hosts("a,A:2379", 2379, "member").is_err());
/// # Ok::<(), fencelock_core::Error>(())
/// ```
pub fn parse_hosts(list: &str, default_port: u16, what: &str) -> Result<Vec<HostPort>> {
    if list.is_empty() {
        return Err(Error::config("names no host"));
    }
    let count = list.split(',').count();
    let mut hosts = Vec::with_capacity(count);
    for (index, text) in list.split(',').enumerate() {
        let host = parse_host(text, default_port).map_err(|e| {
            if count == 1 {
                e
            } else {
                prefixed(e, &format!("{what} {} of {count} ", index + 1))
            }
        })?;
        hosts.push(host);
    }
    distinct(&hosts, what)?;
    Ok(hosts)
}

/// Refuses the same server twice (the host compared without regard to case): it would be
/// counted twice, towards a quorum for instance. The message names the repeated one, in
/// lower case: `node h1:6379 is listed twice (each must be a different server)`.
pub fn distinct(hosts: &[HostPort], what: &str) -> Result<()> {
    let mut seen = HashSet::new();
    for host in hosts {
        let key = HostPort::new(host.host.to_ascii_lowercase(), host.port);
        if !seen.insert(key.clone()) {
            return Err(Error::config(format!(
                "{what} {key} is listed twice (each must be a different server)"
            )));
        }
    }
    Ok(())
}

/// What is wrong with the port of `input`, a URL the `url` crate refused with an invalid
/// port: `port 99999 is out of range (1 to 65535)` or ``port `x` is not a number from 1 to
/// 65535``. Quotes nothing when [`safe_to_echo`] says the port may be a piece of a password.
pub fn port_problem(input: &str) -> String {
    if !safe_to_echo(input) {
        return "the port is not a number from 1 to 65535; a password holding `/`, `?` or `#` \
                must be percent-encoded"
            .to_owned();
    }
    let rest = input.split_once("://").map_or(input, |(_, rest)| rest);
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    // The port of the last host of a list.
    let host_port = host_port.rsplit(',').next().unwrap_or(host_port);
    let port = match host_port.rsplit_once(']') {
        Some((_, after)) => after.strip_prefix(':').unwrap_or(after),
        None => host_port.rsplit_once(':').map_or("", |(_, port)| port),
    };
    match parse_port(port) {
        Err(Error::InvalidConfig { message, .. }) => message,
        _ => "the port is not a number from 1 to 65535".to_owned(),
    }
}

/// A port number, 1 to 65535.
fn parse_port(port: &str) -> Result<u16> {
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        let shown: String = port.chars().take(16).collect();
        return Err(Error::config(format!(
            "port `{shown}` is not a number from 1 to 65535"
        )));
    }
    match port.parse::<u16>() {
        Ok(0) => Err(Error::config("port 0 is out of range (1 to 65535)")),
        Ok(port) => Ok(port),
        Err(_) => {
            let digits = port.trim_start_matches('0');
            let shown: String = digits.chars().take(16).collect();
            Err(Error::config(format!(
                "port {shown} is out of range (1 to 65535)"
            )))
        }
    }
}

/// `error` with `prefix` (which ends in a space) in front of its message.
fn prefixed(error: Error, prefix: &str) -> Error {
    match error {
        Error::InvalidConfig { message, source } => Error::InvalidConfig {
            message: format!("{prefix}{message}"),
            source,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    fn refusal(result: Result<impl std::fmt::Debug>) -> String {
        match result {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn reads_hosts_ports_and_ipv6() {
        for (text, host, port) in [
            ("h", "h", 2379),
            ("h:", "h", 2379),
            ("h:80", "h", 80),
            ("h:080", "h", 80),
            ("H.Example:1", "h.example", 1),
            ("127.0.0.1:7", "127.0.0.1", 7),
            ("[::1]", "::1", 2379),
            ("[::1]:7000", "::1", 7000),
            ("[0:0::1]:7000", "::1", 7000),
        ] {
            assert_eq!(
                parse_host(text, 2379).unwrap(),
                HostPort::new(host, port),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_what_is_not_a_host() {
        for (text, expected) in [
            ("", "names no host"),
            (":1", "names no host"),
            ("h:0", "port 0 is out of range"),
            ("h:99999", "port 99999 is out of range"),
            ("h:x1", "port `x1` is not a number"),
            ("h:-1", "port `-1` is not a number"),
            ("::1", "IPv6 address goes in brackets"),
            ("[::1", "lacks its `]`"),
            ("[::1]x", "is not host[:port]"),
            ("a b", "is not host[:port]"),
            ("u@h", "is not host[:port]"),
            ("h/x", "is not host[:port]"),
        ] {
            let message = refusal(parse_host(text, 1));
            assert!(message.contains(expected), "{text:?}: {message}");
        }
    }

    #[test]
    fn lists_name_the_entry_and_refuse_duplicates() {
        assert_eq!(
            parse_hosts("a,b:2", 1, "member").unwrap(),
            [HostPort::new("a", 1), HostPort::new("b", 2)]
        );
        for (list, expected) in [
            ("", "names no host"),
            ("a,,b", "member 2 of 3 names no host"),
            ("a,b:99999", "member 2 of 2 port 99999 is out of range"),
            ("h:1", "h:1"),
            ("h,h:2379", "member h:2379 is listed twice"),
            ("h,H", "member h:2379 is listed twice"),
            ("[::1],[0::1]:2379", "member [::1]:2379 is listed twice"),
        ] {
            let result = parse_hosts(list, 2379, "member");
            if list == "h:1" {
                assert!(result.is_ok());
                continue;
            }
            let message = refusal(result);
            assert!(message.contains(expected), "{list:?}: {message}");
        }
        assert!(distinct(&[HostPort::new("A", 1), HostPort::new("a", 2)], "node").is_ok());
        let message = refusal(distinct(
            &[HostPort::new("A", 1), HostPort::new("a", 1)],
            "node",
        ));
        assert!(message.contains("node a:1 is listed twice"), "{message}");
    }

    #[test]
    fn port_problems_are_worded_without_the_password() {
        assert_eq!(
            port_problem("redis://:pw@h:99999/0"),
            "port 99999 is out of range (1 to 65535)"
        );
        assert_eq!(
            port_problem("mysql://a:b@[::1]:70000/x"),
            "port 70000 is out of range (1 to 65535)"
        );
        assert_eq!(
            port_problem("redis://h:abc"),
            "port `abc` is not a number from 1 to 65535"
        );
        assert_eq!(
            port_problem("etcd://a:1,b:99999"),
            "port 99999 is out of range (1 to 65535)"
        );
        let hidden = port_problem("redis://u:pa/s3cret99999@h");
        assert!(
            !hidden.contains("99999") && !hidden.contains("s3cret"),
            "{hidden}"
        );
    }
}
