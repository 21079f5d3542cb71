//! `mysql://` and `mariadb://`: [`MySqlConfig`] as a [`BackendConfig`], and the schemes this
//! crate owns.

use std::sync::Arc;

use fencelock_core::tools::BenchKit;
use fencelock_core::{BackendConfig, Connected, HostPort, Result, Scheme, async_trait};

use crate::baseline::{MySqlBaseline, MySqlCleanup};
use crate::config::MySqlConfig;

fn parse(url: &str) -> Result<Box<dyn BackendConfig>> {
    Ok(Box::new(MySqlConfig::from_url(url)?))
}

/// The schemes this crate owns, `mysql://` and `mariadb://` (a synonym, kept as written), to
/// register in a [`Schemes`](fencelock_core::Schemes) registry.
pub const SCHEMES: &[Scheme] = &[
    Scheme::new("mysql", "one MySQL or MariaDB database (GET_LOCK)", parse)
        .with_example("mysql://root@127.0.0.1:3306/test"),
    Scheme::new(
        "mariadb",
        "one MariaDB or MySQL database (GET_LOCK; a synonym of mysql://)",
        parse,
    ),
];

#[async_trait]
impl BackendConfig for MySqlConfig {
    fn scheme(&self) -> &str {
        self.scheme_name()
    }

    fn to_url(&self) -> String {
        MySqlConfig::to_url(self)
    }

    fn redacted_url(&self) -> String {
        MySqlConfig::redacted_url(self)
    }

    fn hosts(&self) -> Vec<HostPort> {
        MySqlConfig::hosts(self)
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn BackendConfig>> {
        Ok(Box::new(MySqlConfig::with_hosts(self.clone(), hosts)?))
    }

    fn clone_config(&self) -> Box<dyn BackendConfig> {
        Box::new(self.clone())
    }

    async fn connect(&self) -> Result<Connected> {
        let db = MySqlConfig::connect(self).await?;
        Ok(Connected {
            backend: db.backend(),
            storage: Arc::new(db.storage()),
        })
    }

    /// The lock backend the config chose and fencelock's tables under its prefix, against
    /// raw `GET_LOCK(name, 0)` + `RELEASE_LOCK(name)` on a pool of its own to the same
    /// database ([`MySqlBaseline`]). Named after the backend (`mysql`) in reports; the
    /// cleanup deletes the run's rows from every table of the prefix ([`MySqlCleanup`]).
    async fn bench_kit(&self) -> Result<Option<BenchKit>> {
        let db = MySqlConfig::connect(self).await?;
        let backend = db.backend();
        let name = backend.name();
        let fenced = Connected {
            backend,
            storage: Arc::new(db.storage()),
        };
        let baseline = MySqlBaseline::connect(self).await?;
        let cleanup = MySqlCleanup::new(baseline.pool().clone(), db.prefix())?;
        Ok(Some(
            BenchKit::new(name, fenced, Arc::new(baseline)).cleanup(Arc::new(cleanup)),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_scheme_parses_round_trips_and_hides_the_password() {
        for scheme in SCHEMES {
            let url = format!(
                "{}://app:hunter2@db.example:3307/orders?prefix=t_",
                scheme.name
            );
            let config = (scheme.parse)(&url).unwrap();
            assert_eq!(config.scheme(), scheme.name);
            assert_eq!(config.to_url(), url);
            assert_eq!((scheme.parse)(&config.to_url()).unwrap().to_url(), url);
            let shown = config.redacted_url();
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("app:***@db.example"), "{shown}");
            assert!(config.is_shared());
            assert_eq!(config.hosts(), vec![HostPort::new("db.example", 3307)]);
            let moved = config.with_hosts(&[HostPort::new("proxy", 4000)]).unwrap();
            assert_eq!(moved.scheme(), scheme.name);
            assert!(moved.to_url().contains("app:hunter2@proxy:4000/orders"));
            assert!(config.with_hosts(&[]).is_err());
            assert!(
                config
                    .clone_config()
                    .downcast_ref::<MySqlConfig>()
                    .is_some()
            );
        }
        // The scheme is what the config prints, whatever case the URL used.
        let config = (SCHEMES[1].parse)("MariaDB://root@db/test").unwrap();
        assert_eq!(config.scheme(), "mariadb");
        assert!(config.to_url().starts_with("mariadb://"));
    }
}
