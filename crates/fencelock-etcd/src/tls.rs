//! TLS to the members: the checks of the URL's `tls`, `tls_ca`, `tls_cert` and `tls_key`
//! options ([`TlsFiles`], core's, reads them) that need the `tls` feature or rustls, the
//! client's TLS options read from the PEM files at connect (feature `tls`), and what a failed
//! handshake says.
//!
//! No crypto provider is installed here: tonic (under etcd-client) builds its rustls config
//! with the process's provider when there is one, else with ring (`tls-ring`), so a build
//! that holds two providers does not panic.

use std::path::{Path, PathBuf};

pub(crate) use fencelock_core::url::TlsFiles;
use fencelock_core::{Error, HostPort, Result};

use crate::config::EtcdConfig;

impl EtcdConfig {
    /// With TLS to every member, trusting the CA certificates in the PEM file at `path` (in
    /// the URL, `?tls=true&tls_ca=/path/ca.pem`); no other CA is trusted. Each member's
    /// certificate must chain to one of them and name the member's host as the URL writes
    /// it. Needs the `tls` feature: without it, [`connect`](Self::connect) refuses the
    /// config saying so. The file is read at connect.
    pub fn tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.get_or_insert_with(TlsFiles::default).ca = Some(path.into());
        self
    }

    /// With a client certificate and its private key (PEM files) shown to the members (in
    /// the URL, `tls_cert=` and `tls_key=`), for a cluster started with
    /// `--client-cert-auth`; with authentication on and no password in the URL, etcd takes
    /// the certificate's common name as the user. With [`tls_ca`](Self::tls_ca) only.
    pub fn tls_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        let tls = self.tls.get_or_insert_with(TlsFiles::default);
        tls.cert = Some(cert.into());
        tls.key = Some(key.into());
        self
    }

    /// Whether the members are reached over TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The CA file trusted for the members' certificates, with TLS.
    pub fn tls_ca_path(&self) -> Option<&Path> {
        self.tls.as_ref().and_then(|tls| tls.ca.as_deref())
    }
}

/// Checks TLS settings without reading the files: the `tls` feature built in, the rules of
/// [`TlsFiles::check`] (a CA named, a certificate and a key together), and members whose
/// hosts a certificate can be checked against (a DNS name or an IP address).
pub(crate) fn check(tls: Option<&TlsFiles>, members: &[HostPort]) -> Result<()> {
    let Some(tls) = tls else {
        return Ok(());
    };
    if !cfg!(feature = "tls") {
        return Err(Error::config(
            "etcd tls=true needs TLS support: enable the `tls` feature of fencelock-etcd (the \
             `tls` feature of the fencelock crate and of the CLI)",
        ));
    }
    tls.check().map_err(|e| e.in_context("etcd"))?;
    #[cfg(feature = "tls")]
    for member in members {
        if rustls::pki_types::ServerName::try_from(member.host.as_str()).is_err() {
            return Err(Error::config(format!(
                "etcd member host {:?} is not a DNS name or IP address a TLS certificate can \
                 be checked against",
                member.host
            )));
        }
    }
    #[cfg(not(feature = "tls"))]
    let _ = members;
    Ok(())
}

/// Reads the PEM file of the option `name`; errors name the option and the path, never the
/// content.
#[cfg(feature = "tls")]
fn read_pem(name: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::InvalidConfig {
        message: format!("etcd {name} {}: cannot read it: {e}", path.display()),
        source: Some(Box::new(e)),
    })
}

/// Whether `pem` holds at least one PEM certificate and nothing that fails to parse.
#[cfg(feature = "tls")]
fn holds_certificates(pem: &[u8]) -> bool {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .is_ok_and(|found| !found.is_empty())
}

/// The client's TLS options: the CA certificates of `tls_ca`, and the client certificate and
/// key when given, each file read and checked to hold what its option says. Host names are
/// verified against each member's host as the URL writes it (tonic takes it from the
/// endpoint), and that is never turned off.
#[cfg(feature = "tls")]
pub(crate) fn client_options(files: &TlsFiles) -> Result<etcd_client::TlsOptions> {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let Some(ca_path) = &files.ca else {
        return Err(Error::config("etcd tls=true needs tls_ca"));
    };
    let ca = read_pem("tls_ca", ca_path)?;
    if !holds_certificates(&ca) {
        return Err(Error::config(format!(
            "etcd tls_ca {} is not a PEM file of certificates (-----BEGIN CERTIFICATE-----)",
            ca_path.display()
        )));
    }
    let mut options =
        etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(ca));
    if let (Some(cert_path), Some(key_path)) = (&files.cert, &files.key) {
        let cert = read_pem("tls_cert", cert_path)?;
        let key = read_pem("tls_key", key_path)?;
        if !holds_certificates(&cert) {
            return Err(Error::config(format!(
                "etcd tls_cert {} holds no PEM certificate",
                cert_path.display()
            )));
        }
        if PrivateKeyDer::from_pem_slice(&key).is_err() {
            return Err(Error::config(format!(
                "etcd tls_key {} holds no PEM private key",
                key_path.display()
            )));
        }
        options = options.identity(etcd_client::Identity::from_pem(cert, key));
    }
    Ok(options)
}

/// A TLS handshake that failed, as rustls reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HandshakeFailure {
    /// Whether the member's certificate was refused (not trusted, or not for its name).
    pub(crate) certificate: bool,
    /// rustls' words.
    pub(crate) detail: String,
}

/// The failed TLS handshake among `error`'s causes, if any (never without the `tls`
/// feature).
pub(crate) fn handshake_failure(error: &etcd_client::Error) -> Option<HandshakeFailure> {
    #[cfg(feature = "tls")]
    {
        crate::error::causes(error).find_map(|cause| {
            let tls = cause.downcast_ref::<rustls::Error>()?;
            Some(HandshakeFailure {
                certificate: matches!(
                    tls,
                    rustls::Error::InvalidCertificate(_)
                        | rustls::Error::NoCertificatesPresented
                        | rustls::Error::UnsupportedNameType
                ),
                detail: tls.to_string(),
            })
        })
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = error;
        None
    }
}

/// What `connect` says of a failure it can explain: a failed handshake is
/// [`Error::InvalidConfig`] (no retry fixes a certificate that does not check, or a port
/// without TLS), naming the members and what to check. A member that took the connection
/// and then closed it stays [`Error::Unavailable`] with a hint: a TLS port does so with a
/// plain client, and a member asking for client certificates with a client that has none.
pub(crate) fn explained_at_connect(error: Error, config: &EtcdConfig, members: &str) -> Error {
    let cause = match &error {
        Error::Unavailable {
            source: Some(source),
            ..
        } => source.downcast_ref::<etcd_client::Error>(),
        _ => None,
    };
    let Some(cause) = cause else {
        return error;
    };
    // The client does not say which member failed: with several, the message names them all.
    let member = if members.contains(',') {
        format!("an etcd member of {members}")
    } else {
        format!("etcd member {members}")
    };
    let failure = handshake_failure(cause);
    if failure.is_none() && closed_by_peer(cause) {
        let hint = if config.is_tls() {
            "if it asks clients for a certificate (--client-cert-auth), the URL needs tls_cert \
             and tls_key, of a certificate its CA signed"
        } else {
            "if it serves TLS, the URL needs tls=true&tls_ca=/path/ca.pem"
        };
        return error.in_context(&format!(
            "{member} took the connection and closed it ({hint})"
        ));
    }
    let Some(failure) = failure else {
        return error;
    };
    let ca = config
        .tls_ca_path()
        .map(|path| path.display().to_string())
        .unwrap_or_default();
    let message = if failure.certificate {
        format!(
            "the TLS certificate of {member} could not be verified ({}): check \
             that tls_ca {ca} is the CA that signed the members' certificates, and that these \
             are made out to the host names of the URL",
            failure.detail
        )
    } else {
        format!(
            "the TLS handshake with {member} failed ({}): does the port serve \
             TLS, and does the member accept this client (a client certificate, tls_cert and \
             tls_key, for a member started with --client-cert-auth)?",
            failure.detail
        )
    };
    let source = match error {
        Error::Unavailable { source, .. } => source,
        _ => None,
    };
    Error::InvalidConfig { message, source }
}

/// Whether the connection was made and then closed or broken by the member before it
/// answered (a gRPC transport error that is not a refused connection).
fn closed_by_peer(error: &etcd_client::Error) -> bool {
    !crate::cluster::never_sent(error)
        && crate::error::causes(error).any(|cause| cause.is::<tonic::transport::Error>())
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
    fn a_password_in_the_clear_to_a_remote_member_is_flagged() {
        let exposed = |url: &str| EtcdConfig::from_url(url).unwrap().password_exposed();
        assert!(exposed("etcd://app:pw@etcd1.example:2379"));
        assert!(exposed("etcd://app:pw@127.0.0.1:2379,etcd2.example"));
        assert!(!exposed("etcd://app:pw@127.0.0.1:2379"));
        assert!(!exposed("etcd://etcd1.example:2379"));
        if cfg!(feature = "tls") {
            // Over TLS the member is checked against tls_ca: the password is not in the clear.
            assert!(!exposed(
                "etcd://app:pw@etcd1.example?tls=true&tls_ca=/ca.pem"
            ));
            let built = EtcdConfig::from_url("etcd://app:pw@etcd1.example")
                .unwrap()
                .tls_ca("/ca.pem");
            assert!(!built.password_exposed());
        }
    }

    #[test]
    fn tls_file_options_need_tls_true() {
        for (url, named) in [
            ("etcd://h?tls_ca=/ca.pem", "`tls_ca` needs tls=true"),
            (
                "etcd://h?tls=false&tls_ca=/ca.pem",
                "`tls_ca` needs tls=true",
            ),
            (
                "etcd://h?tls_cert=/c.pem&tls_key=/k.pem",
                "`tls_cert`, `tls_key` needs tls=true",
            ),
            (
                "etcd://h?tls=yes&tls_ca=/ca.pem",
                "option `tls` is `true` or `false`",
            ),
            ("etcd://h?tls=true&tls=true", "repeats the option `tls`"),
            ("etcd://h?tls_ca=", "option `tls_ca` is an empty path"),
            ("etcd://h?tls_kee=/k", "unknown option `tls_kee`"),
        ] {
            let message = refusal(url);
            assert!(message.contains(named), "{url}: {message}");
        }
        let plain = EtcdConfig::from_url("etcd://h?tls=false").unwrap();
        assert!(!plain.is_tls());
        assert_eq!(plain, EtcdConfig::from_url("etcd://h").unwrap());
        assert_eq!(plain.to_url(), "etcd://h:2379");
    }

    #[test]
    fn tls_needs_its_feature_a_ca_a_key_with_a_certificate_and_checkable_hosts() {
        let url = "etcd://u:s3cret@localhost:2379?prefix=p&tls=true&tls_ca=/etc/my%20ca+x.pem";
        if !cfg!(feature = "tls") {
            for refused in [refusal(url), refusal("etcd://h?tls=true")] {
                assert!(refused.contains("enable the `tls` feature of fencelock-etcd"));
            }
            let built = EtcdConfig::from_url("etcd://h").unwrap().tls_ca("/ca.pem");
            let message = check(built.tls.as_ref(), &built.hosts()).unwrap_err();
            assert!(message.to_string().contains("`tls` feature"), "{message}");
            return;
        }
        let config = EtcdConfig::from_url(url).unwrap();
        assert!(config.is_tls());
        assert_eq!(config.tls_ca_path(), Some(Path::new("/etc/my ca x.pem")));
        assert_eq!(
            config.endpoints(),
            vec!["https://localhost:2379".to_owned()]
        );
        assert_eq!(EtcdConfig::from_url(&config.to_url()).unwrap(), config);
        assert_eq!(
            config.redacted_url(),
            "etcd://u:***@localhost:2379?prefix=p&tls=true&tls_ca=%2Fetc%2Fmy+ca+x.pem"
        );
        let built = EtcdConfig::from_url("etcd://u:s3cret@localhost?prefix=p")
            .unwrap()
            .tls_ca("/etc/my ca x.pem");
        assert_eq!(built, config);
        let with_client = built.tls_client_cert("/c.pem", "/k.pem");
        let shown = with_client.to_string();
        assert!(
            shown.ends_with("&tls_cert=%2Fc.pem&tls_key=%2Fk.pem"),
            "{shown}"
        );
        assert!(!shown.contains("s3cret") && !format!("{with_client:?}").contains("s3cret"));
        assert_eq!(
            EtcdConfig::from_url(&with_client.to_url()).unwrap(),
            with_client
        );
        for (url, named) in [
            ("etcd://h?tls=true", "needs tls_ca=/path/ca.pem"),
            ("etcd://h?tls=true&tls_cert=/c&tls_key=/k", "needs tls_ca"),
            (
                "etcd://h?tls=true&tls_ca=/a&tls_cert=/c",
                "tls_cert and tls_key go together",
            ),
            (
                "etcd://h?tls=true&tls_ca=/a&tls_key=/k",
                "tls_cert and tls_key go together",
            ),
            (
                "etcd://ok,bad!name?tls=true&tls_ca=/a",
                "host \"bad!name\" is not a DNS name or IP address",
            ),
        ] {
            let message = refusal(url);
            assert!(message.contains(named), "{url}: {message}");
        }
        // IP addresses, IPv6 too, are names a certificate can be checked against.
        EtcdConfig::from_url("etcd://127.0.0.1,[::1]:2390?tls=true&tls_ca=/a").unwrap();
        // The builder's settings are checked by with_hosts and connect as the URL's are.
        let moved = config
            .clone()
            .with_hosts(&[HostPort::new("bad!name", 2379)]);
        assert!(moved.unwrap_err().to_string().contains("TLS certificate"));
        let no_ca = EtcdConfig::from_url("etcd://h")
            .unwrap()
            .tls_client_cert("/c", "/k");
        let message = check(no_ca.tls.as_ref(), &no_ca.hosts()).unwrap_err();
        assert!(message.to_string().contains("tls_ca"), "{message}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_files_that_cannot_be_used_are_named_without_their_content() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let not_pem = dir.join("not.pem");
        std::fs::write(&not_pem, "s3cret-looking text, not PEM").unwrap();
        let missing = dir.join("missing.pem");
        let files = |ca: &Path, cert: Option<&Path>, key: Option<&Path>| TlsFiles {
            ca: Some(ca.to_owned()),
            cert: cert.map(Path::to_owned),
            key: key.map(Path::to_owned),
        };
        for (tls, named) in [
            (files(&missing, None, None), "tls_ca"),
            (files(&not_pem, None, None), "tls_ca"),
        ] {
            let message = client_options(&tls).unwrap_err().to_string();
            assert!(message.contains(named), "{message}");
            assert!(!message.contains("s3cret"), "{message}");
        }
    }
}
