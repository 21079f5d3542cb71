//! `ZkConfig`: the `zookeeper://` grammar, its validation, and the typed settings of a client.

use std::fmt;
use std::path::{Path, PathBuf};
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
/// - `tls=true` (feature `tls`): every member over TLS; `tls_ca=/path/ca.pem` (required with
///   it) names the PEM file of the CA certificates the servers' certificates must chain to,
///   for the host names of the URL; `tls_cert` and `tls_key` (both or neither) a client
///   certificate and its key, for servers that ask for one (`ssl.clientAuth`).
///
/// SASL is not offered: an option naming it is refused as unknown.
///
/// ```
/// use fencelock_zookeeper::ZkConfig;
/// let config = ZkConfig::from_url("zookeeper://zk1,zk2:2182/apps?prefix=orders").unwrap();
/// assert_eq!(config.to_url(), "zookeeper://zk1:2181,zk2:2182/apps?prefix=orders");
/// assert!(ZkConfig::from_url("zookeeper://zk1?tls=true").is_err()); // no tls_ca
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ZkConfig {
    hosts: Vec<HostPort>,
    credentials: Option<(String, String)>,
    chroot: Option<String>,
    session_timeout: Option<Duration>,
    prefix: Option<String>,
    tls: Option<TlsFiles>,
}

/// The PEM files of a TLS config: paths only, read at connect.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct TlsFiles {
    pub(crate) ca: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

impl fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted_url())
    }
}

fencelock_core::redacted_config!(ZkConfig);

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
            tls: None,
        };
        let mut tls = false;
        let mut files = TlsFiles {
            ca: None,
            cert: None,
            key: None,
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
                    "tls" => {
                        tls = match &*value {
                            "true" => true,
                            "false" => false,
                            _ => {
                                return Err(invalid(format!(
                                    "zookeeper:// option tls is true or false, not {value:?}"
                                )));
                            }
                        };
                    }
                    "tls_ca" => files.ca = Some(tls_path(name, &value)?),
                    "tls_cert" => files.cert = Some(tls_path(name, &value)?),
                    "tls_key" => files.key = Some(tls_path(name, &value)?),
                    _ => {
                        return Err(invalid(format!(
                            "unknown zookeeper:// option {name:?} (known: session_timeout, \
                             prefix, tls, tls_ca, tls_cert, tls_key; SASL is not supported)"
                        )));
                    }
                }
            }
        }
        if tls {
            config.tls = Some(files);
        } else if files
            != (TlsFiles {
                ca: None,
                cert: None,
                key: None,
            })
        {
            return Err(invalid(
                "zookeeper:// options tls_ca, tls_cert and tls_key need tls=true",
            ));
        }
        config.check_tls()?;
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
        if let Some(tls) = &self.tls {
            options.push("tls=true".to_owned());
            for (name, path) in [
                ("tls_ca", &tls.ca),
                ("tls_cert", &tls.cert),
                ("tls_key", &tls.key),
            ] {
                if let Some(path) = path {
                    let text = path.to_string_lossy();
                    options.push(format!("{name}={}", utf8_percent_encode(&text, OPTION)));
                }
            }
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
        self.check_tls()?;
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

    /// With TLS to every member, trusting the CA certificates in the PEM file at `path` (in
    /// the URL, `?tls=true&tls_ca=/path/ca.pem`). Needs the `tls` feature: without it,
    /// `connect` refuses the config saying so. The file is read at connect.
    pub fn tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        let tls = self.tls.get_or_insert(TlsFiles {
            ca: None,
            cert: None,
            key: None,
        });
        tls.ca = Some(path.into());
        self
    }

    /// With a client certificate and its private key (PEM files) shown to servers that ask
    /// for one (in the URL, `tls_cert=` and `tls_key=`); with [`tls_ca`](Self::tls_ca) only.
    pub fn tls_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        let tls = self.tls.get_or_insert(TlsFiles {
            ca: None,
            cert: None,
            key: None,
        });
        tls.cert = Some(cert.into());
        tls.key = Some(key.into());
        self
    }

    /// Whether the members are reached over TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The CA file trusted for the servers' certificates, with TLS.
    pub fn tls_ca_path(&self) -> Option<&Path> {
        self.tls.as_ref().and_then(|tls| tls.ca.as_deref())
    }

    pub(crate) fn tls_files(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// Checks the TLS settings without reading the files: a CA named, a certificate and a key
    /// together, host names TLS can verify, and the `tls` feature built in.
    fn check_tls(&self) -> Result<()> {
        let Some(tls) = &self.tls else {
            return Ok(());
        };
        if !cfg!(feature = "tls") {
            return Err(invalid(
                "zookeeper:// tls=true needs TLS support: enable the `tls` feature of \
                 fencelock-zookeeper (the `tls` feature of the fencelock crate and of the CLI)",
            ));
        }
        if tls.ca.is_none() {
            return Err(invalid(
                "zookeeper:// tls=true needs tls_ca=/path/ca.pem: the CA certificates the \
                 servers' certificates chain to (there are no built-in roots)",
            ));
        }
        if tls.cert.is_some() != tls.key.is_some() {
            return Err(invalid(
                "zookeeper:// tls_cert and tls_key go together (a client certificate and its key)",
            ));
        }
        #[cfg(feature = "tls")]
        for host in &self.hosts {
            if rustls::pki_types::ServerName::try_from(host.host.as_str()).is_err() {
                return Err(invalid(format!(
                    "zookeeper:// host {:?} is not a DNS name or IP address a TLS certificate \
                     can be checked against",
                    host.host
                )));
            }
        }
        Ok(())
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

    /// The digest user of the credentials, if any.
    pub(crate) fn digest_user(&self) -> Option<&str> {
        self.credentials.as_ref().map(|(user, _)| user.as_str())
    }

    /// Whether the credentials' password would cross to a member off this machine in the
    /// clear (no `tls=true`): what connecting warns about.
    pub(crate) fn password_exposed(&self) -> bool {
        let checked = self.tls_files().is_some();
        self.hosts().iter().any(|member| {
            fencelock_core::password_exposed(self.credentials.is_some(), &member.host, checked)
        })
    }

    /// Checks what the builder methods may have set, as [`from_url`](Self::from_url) does.
    pub(crate) fn validate(&self) -> Result<()> {
        validate_prefix(self.prefix_name())?;
        self.check_tls()?;
        let timeout = self.session_timeout_value();
        if timeout < Duration::from_millis(100) || timeout > Duration::from_secs(3600) {
            return Err(invalid(format!(
                "zookeeper:// session_timeout {timeout:?} is outside 100ms..1h"
            )));
        }
        Ok(())
    }
}

fn tls_path(name: &str, value: &str) -> Result<PathBuf> {
    if value.is_empty() {
        return Err(invalid(format!(
            "zookeeper:// option {name} is an empty path"
        )));
    }
    Ok(PathBuf::from(value))
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

    #[test]
    fn a_password_in_the_clear_to_a_remote_member_is_flagged() {
        let exposed = |url: &str| ZkConfig::from_url(url).unwrap().password_exposed();
        assert!(exposed("zookeeper://app:pw@zk1.example:2181"));
        assert!(exposed(
            "zookeeper://app:pw@127.0.0.1:2181,zk2.example:2181"
        ));
        assert!(!exposed("zookeeper://app:pw@127.0.0.1:2181"));
        assert!(!exposed("zookeeper://zk1.example:2181"));
    }

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
            ("zookeeper://h?tls=true", "tls"),
            ("zookeeper://h?tls=yes", "tls"),
            ("zookeeper://h?tls_ca=/ca.pem", "need tls=true"),
            ("zookeeper://h?sasl=true", "unknown"),
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

    #[test]
    fn tls_options_need_their_feature_and_a_ca() {
        let url = "zookeeper://localhost:2281?tls=true&tls_ca=/etc/my%20ca.pem";
        if cfg!(feature = "tls") {
            let config = ZkConfig::from_url(url).unwrap();
            assert!(config.is_tls());
            assert_eq!(config.tls_ca_path(), Some(Path::new("/etc/my ca.pem")));
            assert_eq!(ZkConfig::from_url(&config.to_url()).unwrap(), config);
            let built = ZkConfig::from_url("zookeeper://localhost:2281")
                .unwrap()
                .tls_ca("/etc/my ca.pem");
            assert_eq!(built, config);
            for (bad, word) in [
                ("zookeeper://h?tls=true", "tls_ca"),
                ("zookeeper://h?tls=true&tls_ca=/a&tls_cert=/c", "tls_key"),
                ("zookeeper://h?tls=true&tls_ca=", "tls_ca"),
                ("zookeeper://[zz:zz]?tls=true&tls_ca=/a", "TLS certificate"),
            ] {
                let message = refusal(bad);
                assert!(message.contains(word), "{bad}: {message}");
            }
            let with_key = "zookeeper://u:s3cret@h?tls=true&tls_ca=/a&tls_cert=/c&tls_key=/k";
            let config = ZkConfig::from_url(with_key).unwrap();
            assert!(!format!("{config:?}").contains("s3cret"));
        } else {
            let message = refusal(url);
            assert!(message.contains("`tls` feature"), "{message}");
            let built = ZkConfig::from_url("zookeeper://h")
                .unwrap()
                .tls_ca("/ca.pem");
            match built.validate() {
                Err(Error::InvalidConfig { message, .. }) => {
                    assert!(message.contains("`tls` feature"), "{message}");
                }
                other => panic!("expected InvalidConfig, got {other:?}"),
            }
        }
    }
}
