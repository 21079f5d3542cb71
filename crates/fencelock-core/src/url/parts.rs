//! The parts of a backend URL, split once for every backend.

use crate::error::{Error, Result};

use super::text::decode_part;

/// The parts of `scheme://[userinfo@]hosts[/path][?query]`, as written (nothing decoded):
/// what every backend's URL parser starts from.
///
/// [`split`](Self::split) checks what no backend URL has (another scheme, a fragment, a
/// NUL); each backend then reads the hosts ([`parse_hosts`](super::parse_hosts)), the
/// credentials ([`credentials`](Self::credentials)), its path and its options
/// ([`Options`](super::Options)), and adds its own context to the errors
/// ([`Error::in_context`]).
///
/// ```
/// use fencelock_core::url::UrlParts;
/// let parts = UrlParts::split("etcd://app:p%40ss@h1,h2:2390/?prefix=orders", "etcd")?;
/// assert_eq!(parts.hosts, "h1,h2:2390");
/// assert_eq!(parts.path, "/");
/// assert_eq!(parts.query, "prefix=orders");
/// assert_eq!(parts.credentials()?, Some(("app".to_owned(), Some("p@ss".to_owned()))));
/// assert!(UrlParts::split("etcd://h#x", "etcd").is_err());
/// assert!(UrlParts::split("redis://h", "etcd").is_err());
/// # Ok::<(), fencelock_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrlParts<'a> {
    /// What precedes the last `@` of the authority, if there is one: `user:password`.
    pub userinfo: Option<&'a str>,
    /// The authority after the userinfo: a host list, a table or bucket name.
    pub hosts: &'a str,
    /// From the first `/` after the authority to the query: empty, or starting with `/`.
    pub path: &'a str,
    /// After the first `?`, without it; empty when there is none.
    pub query: &'a str,
}

impl<'a> UrlParts<'a> {
    /// Splits `url`, whose scheme must be `scheme` (`"etcd"`, compared without regard to
    /// case). Refused with [`Error::InvalidConfig`], never quoting the URL: another scheme,
    /// a fragment (`#...`: a password holding `#` must be percent-encoded), a NUL.
    pub fn split(url: &'a str, scheme: &str) -> Result<Self> {
        let rest = url
            .split_once("://")
            .filter(|(head, _)| head.eq_ignore_ascii_case(scheme))
            .map(|(_, rest)| rest)
            .ok_or_else(|| Error::config(format!("does not start with {scheme}://")))?;
        if rest.contains('\0') {
            return Err(Error::config("holds a NUL character"));
        }
        if rest.contains('#') {
            return Err(Error::config(
                "takes no fragment (`#...`); a password holding `#` must be percent-encoded",
            ));
        }
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        Ok(UrlParts {
            userinfo,
            hosts,
            path,
            query,
        })
    }

    /// The user name and password of the userinfo, each percent-decoded
    /// ([`decode_part`](super::decode_part)): `None` without a userinfo, and no password
    /// when it has no `:`. Whether a user, a password or both are required is the backend's
    /// rule.
    pub fn credentials(&self) -> Result<Option<(String, Option<String>)>> {
        self.credentials_named("user name", "password")
    }

    /// [`credentials`](Self::credentials) for a backend whose two parts have other names
    /// (an access key id and a secret key), as its messages call them.
    pub fn credentials_named(
        &self,
        user_is: &str,
        password_is: &str,
    ) -> Result<Option<(String, Option<String>)>> {
        let Some(userinfo) = self.userinfo else {
            return Ok(None);
        };
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (userinfo, None),
        };
        let user = decode_part(user_is, user)?;
        let password = password
            .map(|password| decode_part(password_is, password))
            .transpose()?;
        Ok(Some((user, password)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn splits_every_part_and_refuses_what_no_backend_url_has() {
        let parts =
            UrlParts::split("ZooKeeper://u:p@a:1,b/chroot/x?prefix=p&x=y", "zookeeper").unwrap();
        assert_eq!(
            parts,
            UrlParts {
                userinfo: Some("u:p"),
                hosts: "a:1,b",
                path: "/chroot/x",
                query: "prefix=p&x=y",
            }
        );
        // The last `@` ends the userinfo; `/` and `?` inside a password end the authority, so
        // they must be percent-encoded (the backends say so).
        let parts = UrlParts::split("etcd://u:p@ss@h", "etcd").unwrap();
        assert_eq!((parts.userinfo, parts.hosts), (Some("u:p@ss"), "h"));
        let plain = UrlParts::split("etcd://h", "etcd").unwrap();
        assert_eq!((plain.userinfo, plain.path, plain.query), (None, "", ""));
        for (url, why) in [
            ("etcd:/h", "does not start with etcd://"),
            ("redis://h", "does not start with etcd://"),
            ("etcd://u:s3cret#@h", "takes no fragment"),
            ("etcd://h?prefix=a#b", "takes no fragment"),
            ("etcd://h\0", "NUL"),
        ] {
            let message = UrlParts::split(url, "etcd").unwrap_err().to_string();
            assert!(message.contains(why), "{url:?}: {message}");
            assert!(!message.contains("s3cret"), "{message}");
        }
    }

    #[test]
    fn credentials_are_decoded_and_optional() {
        let creds = |url| UrlParts::split(url, "x").unwrap().credentials();
        assert_eq!(creds("x://h").unwrap(), None);
        assert_eq!(creds("x://app@h").unwrap(), Some(("app".to_owned(), None)));
        assert_eq!(
            creds("x://a%40b:p%3Aw@h").unwrap(),
            Some(("a@b".to_owned(), Some("p:w".to_owned())))
        );
        assert_eq!(
            creds("x://:pw@h").unwrap(),
            Some((String::new(), Some("pw".to_owned())))
        );
        let message = creds("x://u:s3cret%00@h").unwrap_err().to_string();
        assert!(
            message.contains("NUL") && !message.contains("s3cret"),
            "{message}"
        );
    }
}
