//! `ZkConfig`: the `zookeeper://` grammar, its validation, and the typed settings of a client.

use std::fmt;
use std::time::Duration;

use fencelock_core::{Error, HostPort, Result};
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};

/// The port a host without one means (ZooKeeper's client port).
pub const DEFAULT_PORT: u16 = 2181;

/// The node under the chroot that holds everything fencelock writes, when the URL names none.
pub const DEFAULT_PREFIX: &str = "fencelock";

/// The session timeout asked for when the URL names none. The server clamps it to its
/// `minSessionTimeout..maxSessionTimeout` (2 and 20 ticks by default: 4 s to 40 s); the
/// negotiated value is the backend's longest ttl.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest prefix accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 256;

const SCHEME: &str = "zookeeper://";

/// Characters escaped in the user name and password of a rendered URL.
const USERINFO: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'%')
    .add(b'/')
    .add(b':')
    .add(b'?')
    .add(b'@')
    .add(b'#')
    .add(b'&')
    .add(b'=')
    .add(b',')
    .add(b'[')
    .add(b']');

/// Characters escaped in an option value of a rendered URL.
const OPTION: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'%')
    .add(b'&')
    .add(b'=')
    .add(b'#')
    .add(b'+');

/// How to reach a ZooKeeper ensemble, and where fencelock keeps its znodes there.
///
/// ```text
/// zookeeper://[user:password@]host1[:port][,host2[:port],...][/chroot][?session_timeout=30s&prefix=name]
/// ```
///
/// - Hosts: names, IPv4, or IPv6 in brackets; port 2181 when left out.
/// - `user:password`: ZooKeeper `digest` credentials (`addauth digest user:password`); the
///   znodes fencelock creates then carry the creator-only ACL.
/// - `/chroot`: a path that must exist on the ensemble; everything fencelock writes is under it.
/// - `session_timeout`: `<n>ms` or `<n>s`, the session timeout asked for (default 30 s).
/// - `prefix`: one znode name under the chroot (default `fencelock`).
///
/// TLS and SASL are not offered: an option naming them is refused as unknown.
///
/// ```
/// use fencelock_zookeeper::ZkConfig;
/// let config = ZkConfig::from_url("zookeeper://zk1,zk2:2182/apps?prefix=orders").unwrap();
/// assert_eq!(config.to_url(), "zookeeper://zk1:2181,zk2:2182/apps?prefix=orders");
/// assert!(ZkConfig::from_url("zookeeper://zk1?tls=true").is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ZkConfig {
    hosts: Vec<HostPort>,
    credentials: Option<(String, String)>,
    chroot: Option<String>,
    session_timeout: Option<Duration>,
    prefix: Option<String>,
}

impl fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted_url())
    }
}

impl fmt::Display for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted_url())
    }
}

fn invalid(message: impl Into<String>) -> Error {
    Error::config(message)
}

impl ZkConfig {
    /// Parses a `zookeeper://` URL. Everything wrong is [`Error::InvalidConfig`] naming the
    /// setting; the message never shows the password.
    pub fn from_url(url: &str) -> Result<Self> {
        if url.contains('\0') {
            return Err(invalid("a zookeeper:// URL must not contain NUL"));
        }
        let rest = match url.get(..SCHEME.len()) {
            Some(head) if head.eq_ignore_ascii_case(SCHEME) => &url[SCHEME.len()..],
            _ => return Err(invalid("a ZooKeeper URL starts with zookeeper://")),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        if rest.contains('#') || query.is_some_and(|q| q.contains('#')) {
            return Err(invalid("a zookeeper:// URL has no #fragment"));
        }
        let (authority, chroot) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i..])),
            None => (rest, None),
        };
        let (userinfo, hostlist) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let credentials = userinfo.map(parse_userinfo).transpose()?;
        let hosts = parse_hosts(hostlist)?;
        let chroot = match chroot {
            None | Some("/") => None,
            Some(path) => Some(validate_chroot(path)?),
        };
        let mut config = ZkConfig {
            hosts,
            credentials,
            chroot,
            session_timeout: None,
            prefix: None,
        };
        if let Some(query) = query.filter(|q| !q.is_empty()) {
            let mut seen = Vec::new();
            for pair in query.split('&') {
                let (name, value) = pair.split_once('=').ok_or_else(|| {
                    invalid(format!(
                        "zookeeper:// option {pair:?} has no value (name=value)"
                    ))
                })?;
                let value = percent_decode_str(value)
                    .decode_utf8()
                    .map_err(|_| invalid(format!("zookeeper:// option {name} is not UTF-8")))?;
                if seen.contains(&name) {
                    return Err(invalid(format!(
                        "zookeeper:// option {name} is given twice"
                    )));
                }
                seen.push(name);
                match name {
                    "session_timeout" => {
                        config.session_timeout = Some(parse_timeout(&value)?);
                    }
                    "prefix" => {
                        validate_prefix(&value)?;
                        config.prefix = Some(value.into_owned());
                    }
                    _ => {
                        return Err(invalid(format!(
                            "unknown zookeeper:// option {name:?} (known: session_timeout, \
                             prefix; TLS and SASL are not supported)"
                        )));
                    }
                }
            }
        }
        Ok(config)
    }

    /// The whole URL, the password included.
    pub fn to_url(&self) -> String {
        self.render(false)
    }

    /// The URL with the password replaced by `***`.
    pub fn redacted_url(&self) -> String {
        self.render(true)
    }

    fn render(&self, redact: bool) -> String {
        let mut url = String::from(SCHEME);
        if let Some((user, password)) = &self.credentials {
            url.push_str(&utf8_percent_encode(user, USERINFO).to_string());
            url.push(':');
            if redact {
                url.push_str("***");
            } else {
                url.push_str(&utf8_percent_encode(password, USERINFO).to_string());
            }
            url.push('@');
        }
        url.push_str(&self.connect_string_hosts());
        if let Some(chroot) = &self.chroot {
            url.push_str(chroot);
        }
        let mut options = Vec::new();
        if let Some(timeout) = self.session_timeout {
            options.push(format!("session_timeout={}", render_timeout(timeout)));
        }
        if let Some(prefix) = &self.prefix {
            options.push(format!("prefix={}", utf8_percent_encode(prefix, OPTION)));
        }
        if !options.is_empty() {
            url.push('?');
            url.push_str(&options.join("&"));
        }
        url
    }

    fn connect_string_hosts(&self) -> String {
        self.hosts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The connect string ZooKeeper clients take: `host:port,...[/chroot]`.
    pub fn connect_string(&self) -> String {
        let mut s = self.connect_string_hosts();
        if let Some(chroot) = &self.chroot {
            s.push_str(chroot);
        }
        s
    }

    /// The servers, in URL order.
    pub fn hosts(&self) -> Vec<HostPort> {
        self.hosts.clone()
    }

    /// The same config pointed at `hosts` (a fault proxy per member), one per member in the
    /// same order; a different count is [`Error::InvalidConfig`].
    pub fn with_hosts(mut self, hosts: &[HostPort]) -> Result<Self> {
        if hosts.len() != self.hosts.len() {
            return Err(invalid(format!(
                "zookeeper:// with_hosts needs {} hosts, got {}",
                self.hosts.len(),
                hosts.len()
            )));
        }
        for host in hosts {
            validate_host(&host.host)?;
            if host.port == 0 {
                return Err(invalid("zookeeper:// port 0 is not a port"));
            }
        }
        self.hosts = hosts.to_vec();
        Ok(self)
    }

    /// With `prefix` as the node that holds fencelock's znodes.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// With `timeout` as the session timeout asked for.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = Some(timeout);
        self
    }

    /// The session timeout asked for.
    pub fn session_timeout_value(&self) -> Duration {
        self.session_timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT)
    }

    /// The prefix node's name.
    pub fn prefix_name(&self) -> &str {
        self.prefix.as_deref().unwrap_or(DEFAULT_PREFIX)
    }

    /// The chroot, if any.
    pub fn chroot(&self) -> Option<&str> {
        self.chroot.as_deref()
    }

    /// The digest credentials `user:password`, if any (for `addauth digest`).
    pub(crate) fn digest(&self) -> Option<String> {
        self.credentials
            .as_ref()
            .map(|(user, password)| format!("{user}:{password}"))
    }

    /// Checks what the builder methods may have set, as [`from_url`](Self::from_url) does.
    pub(crate) fn validate(&self) -> Result<()> {
        validate_prefix(self.prefix_name())?;
        let timeout = self.session_timeout_value();
        if timeout < Duration::from_millis(100) || timeout > Duration::from_secs(3600) {
            return Err(invalid(format!(
                "zookeeper:// session_timeout {timeout:?} is outside 100ms..1h"
            )));
        }
        Ok(())
    }
}

fn parse_userinfo(userinfo: &str) -> Result<(String, String)> {
    let (user, password) = userinfo.split_once(':').ok_or_else(|| {
        invalid("zookeeper:// credentials are user:password (digest), the password is missing")
    })?;
    let decode = |s: &str, what: &str| {
        percent_decode_str(s)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| invalid(format!("zookeeper:// {what} is not UTF-8")))
    };
    let user = decode(user, "user name")?;
    let password = decode(password, "password")?;
    if user.is_empty() {
        return Err(invalid("zookeeper:// user name is empty"));
    }
    if user.contains(':') || user.chars().any(char::is_control) {
        return Err(invalid(
            "zookeeper:// user name must not contain ':' or control characters",
        ));
    }
    if password.chars().any(char::is_control) {
        return Err(invalid(
            "zookeeper:// password must not contain control characters",
        ));
    }
    Ok((user, password))
}

fn parse_hosts(list: &str) -> Result<Vec<HostPort>> {
    if list.is_empty() {
        return Err(invalid("zookeeper:// needs at least one host"));
    }
    let mut hosts: Vec<HostPort> = Vec::new();
    for entry in list.split(',') {
        let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(|| {
                invalid(format!(
                    "zookeeper:// host {entry:?}: unclosed IPv6 bracket"
                ))
            })?;
            match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None if after.is_empty() => (host, None),
                None => return Err(invalid(format!("zookeeper:// host {entry:?} is malformed"))),
            }
        } else {
            match entry.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (entry, None),
            }
        };
        validate_host(host)?;
        let port = match port {
            None => DEFAULT_PORT,
            Some(port) => match port.parse::<u16>() {
                Ok(p) if p != 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
                _ => {
                    return Err(invalid(format!(
                        "zookeeper:// host {host}: port {port:?} is not a port (1-65535)"
                    )));
                }
            },
        };
        let host_port = HostPort::new(host, port);
        if hosts.contains(&host_port) {
            return Err(invalid(format!(
                "zookeeper:// host {host_port} is listed twice"
            )));
        }
        hosts.push(host_port);
    }
    Ok(hosts)
}

fn validate_host(host: &str) -> Result<()> {
    let ok = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'));
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "zookeeper:// host {:?} is not a host name or IP address",
            host.chars().take(64).collect::<String>()
        )))
    }
}

fn validate_chroot(path: &str) -> Result<String> {
    let decoded = percent_decode_str(path)
        .decode_utf8()
        .map_err(|_| invalid("zookeeper:// chroot is not UTF-8"))?;
    let ok = decoded.starts_with('/')
        && !decoded.ends_with('/')
        && decoded[1..]
            .split('/')
            .all(|segment| valid_node_name(segment) && segment != "zookeeper");
    if ok && decoded != path {
        return Err(invalid(
            "zookeeper:// chroot must be written without %-escapes",
        ));
    }
    if !ok {
        return Err(invalid(format!(
            "zookeeper:// chroot {:?} is not a ZooKeeper path (/a/b: non-empty names, no \
             trailing /, no . or .., no control characters, not under /zookeeper)",
            decoded.chars().take(64).collect::<String>()
        )));
    }
    Ok(decoded.into_owned())
}

fn valid_node_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name
            .chars()
            .any(|c| c.is_control() || ('\u{e000}'..='\u{f8ff}').contains(&c) || c >= '\u{fff0}')
}

/// Checks a prefix: one znode name (no `/`), at most [`MAX_PREFIX_LEN`] bytes, not `.`,
/// `..` or `zookeeper`, no control characters.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(invalid(format!(
            "zookeeper:// prefix is longer than {MAX_PREFIX_LEN} bytes"
        )));
    }
    if !valid_node_name(prefix) || prefix == "zookeeper" {
        return Err(invalid(format!(
            "zookeeper:// prefix {:?} is not one znode name (non-empty, no /, not . .. or \
             zookeeper, no control characters)",
            prefix.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

fn parse_timeout(value: &str) -> Result<Duration> {
    let bad = || {
        invalid(format!(
            "zookeeper:// session_timeout {value:?} is not a duration (<n>ms or <n>s, 100ms..1h)"
        ))
    };
    let (digits, unit) = if let Some(ms) = value.strip_suffix("ms") {
        (ms, 1)
    } else if let Some(s) = value.strip_suffix('s') {
        (s, 1000)
    } else {
        return Err(bad());
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 10 {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let timeout = Duration::from_millis(n.checked_mul(unit).ok_or_else(bad)?);
    if timeout < Duration::from_millis(100) || timeout > Duration::from_secs(3600) {
        return Err(bad());
    }
    Ok(timeout)
}

fn render_timeout(timeout: Duration) -> String {
    let ms = timeout.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn refusal(url: &str) -> String {
        match ZkConfig::from_url(url) {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("{url}: expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn urls_round_trip() {
        for url in [
            "zookeeper://127.0.0.1:2181",
            "zookeeper://a:1,b:2,[::1]:3/apps/locks?session_timeout=10s&prefix=orders",
            "zookeeper://u:p%40ss@h:2181?session_timeout=1500ms",
        ] {
            let config = ZkConfig::from_url(url).unwrap();
            assert_eq!(config.to_url(), url);
            assert_eq!(ZkConfig::from_url(&config.to_url()).unwrap(), config);
        }
        let config = ZkConfig::from_url("zookeeper://h").unwrap();
        assert_eq!(config.hosts(), vec![HostPort::new("h", 2181)]);
        assert_eq!(config.session_timeout_value(), DEFAULT_SESSION_TIMEOUT);
        assert_eq!(config.prefix_name(), DEFAULT_PREFIX);
    }

    #[test]
    fn bad_urls_are_refused_naming_the_setting_without_the_password() {
        for (url, word) in [
            ("redis://h", "zookeeper://"),
            ("zookeeper://", "at least one host"),
            ("zookeeper://h:0", "port"),
            ("zookeeper://h:99999", "port"),
            ("zookeeper://h:x", "port"),
            ("zookeeper://h,h", "twice"),
            ("zookeeper://h?prefix=a&prefix=b", "twice"),
            ("zookeeper://h?tls=true", "unknown"),
            ("zookeeper://h?session_timeout=5", "session_timeout"),
            ("zookeeper://h?session_timeout=1ms", "session_timeout"),
            ("zookeeper://h?prefix=a/b", "prefix"),
            ("zookeeper://h?prefix=", "prefix"),
            ("zookeeper://h/a/", "chroot"),
            ("zookeeper://h/a//b", "chroot"),
            ("zookeeper://h/zookeeper", "chroot"),
            ("zookeeper://h\0", "NUL"),
            ("zookeeper://u@h", "password"),
        ] {
            let message = refusal(url);
            assert!(message.contains(word), "{url}: {message}");
        }
        let message = refusal("zookeeper://u:s3cret@h:0");
        assert!(!message.contains("s3cret"), "{message}");
        let config = ZkConfig::from_url("zookeeper://u:s3cret@h").unwrap();
        assert!(!format!("{config:?} {config}").contains("s3cret"));
        assert_eq!(config.redacted_url(), "zookeeper://u:***@h:2181");
    }
}
