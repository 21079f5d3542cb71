//! TLS to the ensemble: the client options from a config's PEM files, the host names a
//! certificate can be checked against, and rustls' crypto provider.

use std::path::Path;

use fencelock_core::url::TlsFiles;
use fencelock_core::{Error, HostPort, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use zookeeper_client as zk;

/// zookeeper-client builds its TLS config with `ClientConfig::builder()`, which uses rustls'
/// process-wide crypto provider and panics when the build has two (ring through this crate,
/// aws-lc-rs through zookeeper-client's own rustls dependency) and none is installed. Installs
/// ring, the provider of the workspace's other TLS backends, unless the process has one.
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer leaves that one's provider: fine either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Refuses a host a server's certificate cannot be checked against: TLS verifies each host
/// name as the URL writes it, so it must be a DNS name or an IP address.
pub(crate) fn check_hosts(hosts: &[HostPort]) -> Result<()> {
    for host in hosts {
        if rustls::pki_types::ServerName::try_from(host.host.as_str()).is_err() {
            return Err(Error::config(format!(
                "host {:?} is not a DNS name or IP address a TLS certificate can be checked \
                 against",
                host.host
            )));
        }
    }
    Ok(())
}

/// Reads a PEM file named by the option `name`; errors name the option and the path, never
/// the content.
fn read_pem(name: &str, path: &Path) -> Result<String> {
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| Error::InvalidConfig {
        message: format!("zookeeper {name} {shown}: cannot read it: {e}"),
        source: Some(Box::new(e)),
    })?;
    String::from_utf8(bytes)
        .map_err(|_| Error::config(format!("zookeeper {name} {shown} is not a PEM file")))
}

/// The client's TLS options: the CA certificates of `tls_ca` (checked to be PEM
/// certificates), and the client certificate and key when given. Hostnames are verified.
pub(crate) fn options(files: &TlsFiles) -> Result<zk::TlsOptions> {
    let Some(ca_path) = &files.ca else {
        return Err(Error::config("zookeeper tls=true needs tls_ca"));
    };
    let shown = ca_path.display();
    let ca = read_pem("tls_ca", ca_path)?;
    match CertificateDer::pem_slice_iter(ca.as_bytes()).collect::<std::result::Result<Vec<_>, _>>()
    {
        Ok(found) if !found.is_empty() => {}
        Ok(_) => {
            return Err(Error::config(format!(
                "zookeeper tls_ca {shown} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
            )));
        }
        Err(e) => {
            return Err(Error::config(format!(
                "zookeeper tls_ca {shown} is not a PEM file of certificates: {e}"
            )));
        }
    }
    let mut options = zk::TlsOptions::new().with_pem_ca(&ca).map_err(|_| {
        Error::config(format!(
            "zookeeper tls_ca {shown}: no usable CA certificate"
        ))
    })?;
    if let (Some(cert_path), Some(key_path)) = (&files.cert, &files.key) {
        let cert = read_pem("tls_cert", cert_path)?;
        let key = read_pem("tls_key", key_path)?;
        let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .ok()
            .filter(|found| !found.is_empty());
        if certs.is_none() {
            return Err(Error::config(format!(
                "zookeeper tls_cert {} holds no PEM certificate",
                cert_path.display()
            )));
        }
        if PrivateKeyDer::from_pem_slice(key.as_bytes()).is_err() {
            return Err(Error::config(format!(
                "zookeeper tls_key {} holds no PEM private key",
                key_path.display()
            )));
        }
        options = options.with_pem_identity(&cert, &key).map_err(|_| {
            Error::config(format!(
                "zookeeper tls_cert {} and tls_key {}: not a usable certificate and key",
                cert_path.display(),
                key_path.display()
            ))
        })?;
    }
    Ok(options)
}
