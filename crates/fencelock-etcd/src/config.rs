//! `EtcdConfig`: the `etcd://` grammar, its validation, and the typed settings of a client.

use std::time::Duration;

use fencelock_core::url::{
    Known, Options, UrlParts, parse_host, parse_hosts, redact, safe_to_echo,
};
use fencelock_core::{Error, HostPort, Result};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use url::form_urlencoded;

use crate::cluster::EtcdCluster;
use crate::tls::TlsFiles;

/// The port a host without one means (etcd's client port).
pub const DEFAULT_PORT: u16 = 2379;

/// The key prefix used when the URL names none: every key fencelock writes starts with
/// `fencelock/`.
pub const DEFAULT_PREFIX: &str = "fencelock";

/// The longest prefix accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 256;

/// The largest value [`EtcdStorage`](crate::EtcdStorage) accepts unless configured otherwise:
/// 1.5 MiB (etcd's default `--max-request-bytes`, 1,572,864) less 16 KiB for the keys, the
/// fence and the transaction around the value.
pub const DEFAULT_MAX_VALUE_LEN: usize = 1_572_864 - 16 * 1024;

const SCHEME: &str = "etcd://";

/// The options of an `etcd://` URL.
const KNOWN: &[Known] = &[
    Known::new("prefix"),
    Known::new("tls"),
    Known::new("tls_ca"),
    Known::new("tls_cert"),
    Known::new("tls_key"),
];

/// Characters escaped in the user name and password of a rendered URL: everything that
/// could end or split the userinfo.
const USERINFO: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b':')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'@')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}')
    .add(b',');

/// How to reach an etcd cluster, and where in its key space fencelock keeps its keys.
///
/// The URL grammar (`from_url` / `to_url`):
///
/// ```text
/// etcd://[user:password@]host1[:port][,host2[:port],...][/][?prefix=name][&tls=true&tls_ca=/path/ca.pem[&tls_cert=..&tls_key=..]]
/// ```
///
/// - every member of the cluster the client may talk to, separated by commas; the port
///   defaults to 2379, and IPv6 addresses go in brackets (`[::1]:2379`);
/// - `user:password` (percent-encoded) authenticates with etcd's user/password auth; a user
///   without a password is refused;
/// - `prefix` (percent-encoded, default `fencelock`) starts every key fencelock writes
///   (`<prefix>/lock/<key>`, `<prefix>/token/<key>`, `<prefix>/read/<len>:<key>/<reader>`,
///   `<prefix>/fence/<resource>`, `<prefix>/data/<resource>`), so several installations can
///   share one cluster. Any text of 1 to [`MAX_PREFIX_LEN`] bytes without control characters
///   and without a `/`-separated part named `lock`, `token`, `read`, `queue`, `fence` or
///   `data` ([`validate_prefix`]);
/// - `tls=true` (feature `tls`): every member over TLS (`https://`); `tls_ca=/path/ca.pem`
///   (required with it: there are no built-in roots) names the PEM file of the CA
///   certificates the members' certificates must chain to, checked against each member's
///   host as the URL writes it (a DNS name or an IP address); `tls_cert` and `tls_key` (both
///   or neither) a client certificate and its key, for a cluster started with
///   `--client-cert-auth`. The files are read at connect. Without `tls=true` the connection
///   is plain gRPC over TCP, and the TLS file options are refused.
///
/// Every other option is refused, so a typo is an error instead of a silently ignored
/// setting.
///
/// `Display` and `Debug` show the URL with the password replaced by `***`;
/// [`to_url`](Self::to_url) gives it back whole, and `from_url(&config.to_url())` equals
/// `config`.
///
/// ```
/// use fencelock_etcd::EtcdConfig;
/// let config = EtcdConfig::from_url("etcd://app:s3cret@10.0.0.1,10.0.0.2:2390?prefix=orders")?;
/// assert_eq!(config.prefix_name(), "orders");
/// assert_eq!(config.hosts().len(), 2);
/// assert_eq!(
///     config.to_string(),
///     "etcd://app:***@10.0.0.1:2379,10.0.0.2:2390?prefix=orders"
/// );
/// assert_eq!(EtcdConfig::from_url(&config.to_url())?, config);
/// assert!(EtcdConfig::from_url("etcd://etcd1?tls=true").is_err()); // no tls_ca
/// # Ok::<(), fencelock_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    members: Vec<HostPort>,
    /// Decoded user name and password.
    credentials: Option<(String, String)>,
    prefix: String,
    /// With TLS, its PEM files.
    pub(crate) tls: Option<TlsFiles>,
    pub(crate) operation_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_value_len: usize,
}

fencelock_core::redacted_config!(EtcdConfig {
    operation_timeout,
    connect_timeout,
    max_value_len
});

impl EtcdConfig {
    /// The URL schemes this config owns.
    pub const SCHEMES: &'static [&'static str] = &["etcd"];

    /// A configuration from an `etcd://` URL (grammar above), checked eagerly and completely.
    /// Anything wrong is [`Error::InvalidConfig`] naming what is wrong; the message never
    /// contains the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let shown = redact(url);
        let context = format!("etcd URL {shown:?}");
        let fail = |what: String| Error::config(format!("{context}: {what}"));
        if !safe_to_echo(url) {
            return Err(fail(
                "a user name or password holding `/`, `?` or `#` must be percent-encoded"
                    .to_owned(),
            ));
        }
        let parts = UrlParts::split(url, "etcd").map_err(|e| e.in_context(&context))?;
        let (hosts, path, query) = (parts.hosts, parts.path, parts.query);
        if !path.is_empty() && path != "/" {
            return Err(fail(
                "takes no path (only `/`); a password holding `/`, `?` or `#` must be \
                 percent-encoded"
                    .to_owned(),
            ));
        }
        let credentials = parts
            .credentials()
            .map_err(|e| e.in_context(&context))?
            .map(credentials)
            .transpose()
            .map_err(&fail)?;
        if hosts.is_empty() {
            return Err(fail("names no host".to_owned()));
        }
        let members =
            parse_hosts(hosts, DEFAULT_PORT, "member").map_err(|e| e.in_context(&context))?;
        let options = Options::parse(query, KNOWN).map_err(|e| e.in_context(&context))?;
        let prefix = options.get("prefix").map(str::to_owned);
        if let Some(prefix) = &prefix {
            validate_prefix(prefix)?;
        }
        let tls = TlsFiles::from_options(&options)
            .and_then(|tls| crate::tls::check(tls.as_ref(), &members).map(|()| tls))
            .map_err(|e| e.in_context(&context))?;
        Ok(EtcdConfig {
            members,
            credentials,
            prefix: prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned()),
            tls,
            operation_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            max_value_len: DEFAULT_MAX_VALUE_LEN,
        })
    }

    /// The full URL, **credentials included**, such that `from_url` gives this config back.
    /// Builder settings that have no URL form (time-outs, `max_value_len`) are not in it.
    pub fn to_url(&self) -> String {
        self.render(false)
    }

    /// [`to_url`](Self::to_url) with the password replaced by `***`: what `Display` and
    /// `Debug` show.
    pub fn redacted_url(&self) -> String {
        self.render(true)
    }

    fn render(&self, redacted: bool) -> String {
        let mut url = String::from(SCHEME);
        if let Some((user, password)) = &self.credentials {
            url.push_str(&utf8_percent_encode(user, USERINFO).to_string());
            url.push(':');
            if redacted {
                url.push_str("***");
            } else {
                url.push_str(&utf8_percent_encode(password, USERINFO).to_string());
            }
            url.push('@');
        }
        let hosts: Vec<String> = self.members.iter().map(HostPort::to_string).collect();
        url.push_str(&hosts.join(","));
        let mut options = form_urlencoded::Serializer::new(String::new());
        if self.prefix != DEFAULT_PREFIX {
            options.append_pair("prefix", &self.prefix);
        }
        options.extend_pairs(self.tls.iter().flat_map(TlsFiles::url_options));
        let options = options.finish();
        if !options.is_empty() {
            url.push('?');
            url.push_str(&options);
        }
        url
    }

    /// Every member this config reaches, in URL order, default port filled in.
    pub fn hosts(&self) -> Vec<HostPort> {
        self.members.clone()
    }

    /// The same config pointed at other members: `hosts` must hold as many as the config
    /// has, each a different one, else [`Error::InvalidConfig`].
    pub fn with_hosts(mut self, hosts: &[HostPort]) -> Result<Self> {
        if hosts.len() != self.members.len() {
            return Err(Error::config(format!(
                "this etcd config reaches {} member(s); {} given",
                self.members.len(),
                hosts.len()
            )));
        }
        let mut members = Vec::with_capacity(hosts.len());
        for target in hosts {
            let member = parse_host(&target.to_string(), DEFAULT_PORT)
                .map_err(|e| e.in_context(&format!("etcd member {target}")))?;
            members.push(member);
        }
        fencelock_core::url::distinct(&members, "etcd member")?;
        crate::tls::check(self.tls.as_ref(), &members)?;
        self.members = members;
        Ok(self)
    }

    /// The prefix of every key fencelock writes (default `fencelock`): any text of 1 to
    /// [`MAX_PREFIX_LEN`] bytes [`validate_prefix`] accepts (checked by
    /// [`connect`](Self::connect); `from_url` checks `?prefix=` at once).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The configured prefix.
    pub fn prefix_name(&self) -> &str {
        &self.prefix
    }

    /// The user name, if the URL carries credentials (never the password).
    pub fn user(&self) -> Option<&str> {
        self.credentials.as_ref().map(|(user, _)| user.as_str())
    }

    /// How long one operation may take before it fails with [`Error::Unavailable`]
    /// (default 5 s). A cluster that lost its quorum answers no write: this bounds the wait.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) may take, and each new TCP connection to a
    /// member (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The largest value [`EtcdStorage`](crate::EtcdStorage) accepts, in bytes (default
    /// [`DEFAULT_MAX_VALUE_LEN`], which fits etcd's default request limit). Raise it only
    /// for a cluster started with a larger `--max-request-bytes`; at least 1 MiB.
    pub fn max_value_len(mut self, len: usize) -> Self {
        self.max_value_len = len;
        self
    }

    /// The endpoints as the client library takes them (`http://host:port`, `https://` with
    /// TLS).
    pub(crate) fn endpoints(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.members
            .iter()
            .map(|m| format!("{scheme}://{m}"))
            .collect()
    }

    /// The decoded user name and password.
    pub(crate) fn credentials(&self) -> Option<&(String, String)> {
        self.credentials.as_ref()
    }

    /// The members, `host:port` each, comma-separated: how errors name the cluster.
    pub(crate) fn members_label(&self) -> String {
        let hosts: Vec<String> = self.members.iter().map(HostPort::to_string).collect();
        hosts.join(",")
    }

    /// Whether the password would cross to a member off this machine in the clear (without
    /// `tls=true`): what [`connect`](Self::connect) warns about.
    pub(crate) fn password_exposed(&self) -> bool {
        let checked = self.tls.is_some();
        self.members.iter().any(|member| {
            fencelock_core::password_exposed(self.credentials.is_some(), &member.host, checked)
        })
    }

    /// Checks the builder settings, connects to the cluster and measures its lease
    /// granularity; see [`EtcdCluster`] for what it then provides.
    pub async fn connect(&self) -> Result<EtcdCluster> {
        validate_prefix(&self.prefix)?;
        crate::tls::check(self.tls.as_ref(), &self.members)?;
        if self.operation_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::config("etcd time-outs must be above zero"));
        }
        if self.max_value_len < 1 << 20 {
            return Err(Error::config(format!(
                "etcd max_value_len {} is below 1 MiB",
                self.max_value_len
            )));
        }
        if self.password_exposed() {
            tracing::warn!(
                "the etcd password for {self} crosses plain connections to members off this \
                 machine: add tls=true&tls_ca=/path/ca.pem (feature `tls`), or keep etcd's \
                 client port on a trusted network (DESIGN.md 8.5)"
            );
        }
        EtcdCluster::connect(self).await
    }
}

/// Checks a key prefix: 1 to [`MAX_PREFIX_LEN`] bytes, no control character (so no NUL), and
/// no `/`-separated part that is the name of one of fencelock's key families (`lock`,
/// `token`, `read`, `queue`, `fence`, `data`): with such a part, the keys of one installation
/// could be another's (prefix `app2/lock/x`'s counter of key `y` is prefix `app2`'s lock on
/// key `x/token/y`; DESIGN.md 5.5). Every other character, `/`, spaces and Unicode included,
/// is kept as it is.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    let reason = if prefix.is_empty() {
        Some("is empty".to_owned())
    } else if prefix.len() > MAX_PREFIX_LEN {
        Some("is longer than 256 bytes".to_owned())
    } else if prefix.chars().any(char::is_control) {
        Some("contains a control character".to_owned())
    } else {
        crate::keys::family_in_prefix(prefix).map(|family| {
            format!(
                "has the part {family:?}, a name fencelock gives its own keys ({}): another \
                 installation's keys could then be this one's; choose a prefix none of whose \
                 `/`-separated parts is one of these",
                crate::keys::FAMILIES.join(", ")
            )
        })
    };
    match reason {
        Some(reason) => {
            let shown: String = prefix.chars().take(64).collect();
            Err(Error::config(format!("etcd key prefix {shown:?} {reason}")))
        }
        None => Ok(()),
    }
}

/// The user and password of `etcd://user:password@...`: both given, neither empty.
fn credentials(
    (user, password): (String, Option<String>),
) -> std::result::Result<(String, String), String> {
    let Some(password) = password else {
        return Err("names a user without a password (write etcd://user:password@host)".into());
    };
    if user.is_empty() {
        return Err("names a password without a user".into());
    }
    if password.is_empty() {
        return Err("names a user with an empty password".into());
    }
    Ok((user, password))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn refusal(url: &str) -> String {
        match EtcdConfig::from_url(url) {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("{url}: expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn reads_every_part_and_round_trips() {
        for url in [
            "etcd://127.0.0.1",
            "etcd://127.0.0.1:2379",
            "etcd://a:2379,b:2380,c",
            "etcd://ETCD.example/",
            "etcd://u%40x:p%3A%2F%40w@h1,h2?prefix=app%2Flocks",
            "etcd://[::1]:2390,127.0.0.1",
            "etcd://h?prefix=with%20spaces%20%26%20%3F%25%23%20%C3%BC%F0%9F%94%92",
            "etcd://h:80",
            "etcd://h:080",
        ] {
            let config = EtcdConfig::from_url(url).unwrap();
            assert_eq!(
                EtcdConfig::from_url(&config.to_url()).unwrap(),
                config,
                "{url} -> {}",
                config.to_url()
            );
        }
        let config = EtcdConfig::from_url("etcd://u%40x:p%3Aw@h1,[::1]:2390?prefix=a%2Fb").unwrap();
        assert_eq!(
            config.hosts(),
            vec![HostPort::new("h1", 2379), HostPort::new("::1", 2390)]
        );
        assert_eq!(
            config.credentials(),
            Some(&("u@x".to_owned(), "p:w".to_owned()))
        );
        assert_eq!(config.user(), Some("u@x"));
        assert_eq!(config.prefix_name(), "a/b");
        assert_eq!(
            config.endpoints(),
            vec!["http://h1:2379".to_owned(), "http://[::1]:2390".to_owned()]
        );
        let plain = EtcdConfig::from_url("etcd://h").unwrap();
        assert_eq!(plain.prefix_name(), DEFAULT_PREFIX);
        assert_eq!(plain.to_url(), "etcd://h:2379");
        assert_eq!(
            EtcdConfig::from_url("etcd://h:80").unwrap().hosts(),
            vec![HostPort::new("h", 80)]
        );
        let odd = EtcdConfig::from_url("etcd://h")
            .unwrap()
            .prefix("odd prefix/?&=#%+ ü 🔒");
        assert_eq!(EtcdConfig::from_url(&odd.to_url()).unwrap(), odd);
    }

    #[test]
    fn the_password_never_shows() {
        let config = EtcdConfig::from_url("etcd://app:hunter2@h1,h2").unwrap();
        assert_eq!(config.to_url(), "etcd://app:hunter2@h1:2379,h2:2379");
        for shown in [
            config.to_string(),
            format!("{config:?}"),
            config.redacted_url(),
        ] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("app:***@h1"), "{shown}");
        }
        for bad in [
            "etcd://app:hunter2@h1:99999",
            "etcd://app:hunter2@h1?nope=1",
            "etcd://app:hunter2@h1/path",
            "etcd://app:hunter2@h1:port",
            "etcd://app:hunter2@",
            "etcd://app:hun/ter2@h1",
            "etcd://app:hun?ter2@h1",
            "etcd://app:hun#ter2@h1",
            "etcd://app:pa?x=1@h1",
            "redis://app:hunter2@h1",
            "etcd://app:hunter2@h1,h1",
            "etcd://app:hunter2@h1?prefix=",
        ] {
            let message = refusal(bad);
            assert!(!message.contains("hunter2"), "{message}");
            assert!(!message.contains("ter2"), "{message}");
        }
    }

    #[test]
    fn names_what_is_wrong() {
        let cases = [
            ("etcd://h:99999", "port 99999 is out of range"),
            ("etcd://h:0", "port 0 is out of range"),
            ("etcd://h:x1", "port `x1` is not a number"),
            (
                "etcd://a,b:99999",
                "member 2 of 2 port 99999 is out of range",
            ),
            ("etcd://", "names no host"),
            ("etcd://a,,b", "member 2 of 3 names no host"),
            ("etcd://u:p@", "names no host"),
            ("etcd://h/x", "takes no path"),
            ("etcd://h?foo=1", "unknown option `foo`"),
            ("etcd://h?prefix=a&prefix=b", "repeats the option `prefix`"),
            ("etcd://h?prefix=", "is empty"),
            (
                "etcd://h?prefix=a%00b",
                "option `prefix` holds a NUL character",
            ),
            ("etcd://u%00:pw@h", "the user name holds a NUL"),
            ("etcd://u:p%00w@h", "the password holds a NUL"),
            ("etcd://h?prefix=a&PREFIX=b", "unknown option `PREFIX`"),
            ("etcd://h,H:2379", "member h:2379 is listed twice"),
            ("etcd://h?prefix=a%ffb", "not UTF-8 once percent-decoded"),
            ("etcd://h#frag", "no fragment"),
            ("etcd://user@h", "a user without a password"),
            ("etcd://:pw@h", "a password without a user"),
            ("etcd://u:@h", "empty password"),
            ("etcd://h,h:2379", "member h:2379 is listed twice"),
            ("redis://h", "does not start with etcd://"),
            ("h:2379", "does not start with etcd://"),
        ];
        for (url, expected) in cases {
            let message = refusal(url);
            assert!(message.contains(expected), "{url}: {message}");
        }
        let long = format!("etcd://h?prefix={}", "p".repeat(MAX_PREFIX_LEN + 1));
        assert!(refusal(&long).contains("longer than 256 bytes"));
        let longest = format!("etcd://h?prefix={}", "p".repeat(MAX_PREFIX_LEN));
        EtcdConfig::from_url(&longest).unwrap();
    }

    #[test]
    fn with_hosts_points_elsewhere() {
        let config = EtcdConfig::from_url("etcd://u:pw@a,b?prefix=t").unwrap();
        let moved = config
            .clone()
            .with_hosts(&[HostPort::new("10.0.0.7", 4000), HostPort::new("::1", 4001)])
            .unwrap();
        assert_eq!(
            moved.hosts(),
            vec![HostPort::new("10.0.0.7", 4000), HostPort::new("::1", 4001)]
        );
        assert_eq!(
            moved.to_url(),
            "etcd://u:pw@10.0.0.7:4000,[::1]:4001?prefix=t"
        );
        assert!(config.clone().with_hosts(&[HostPort::new("a", 1)]).is_err());
        assert!(
            config
                .clone()
                .with_hosts(&[HostPort::new("a", 1), HostPort::new("a", 1)])
                .is_err()
        );
        assert!(
            config
                .with_hosts(&[HostPort::new("a", 0), HostPort::new("b", 1)])
                .is_err()
        );
    }
}
