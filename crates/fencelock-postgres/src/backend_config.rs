//! `postgres://` and `postgresql://`: [`PgConfig`] as a [`BackendConfig`].

use std::sync::Arc;

use async_trait::async_trait;
use fencelock_core::tools::{BenchKit, SessionFaults};
use fencelock_core::{BackendConfig, Connected, HostPort, Result, Scheme};

use crate::PgConfig;
use crate::session_faults::PgSessionFaults;

const SUMMARY: &str = "one PostgreSQL database (?backend=lease, the default, or advisory)";

/// The schemes this crate owns, `postgres://` and `postgresql://` (the same grammar, see
/// [`PgConfig`]), to register in a [`Schemes`](fencelock_core::Schemes) registry.
pub const SCHEMES: &[Scheme] = &[
    Scheme::new("postgres", SUMMARY, parse).with_example("postgres://postgres@127.0.0.1:5432/test"),
    Scheme::new("postgresql", SUMMARY, parse),
];

fn parse(url: &str) -> Result<Box<dyn BackendConfig>> {
    Ok(Box::new(PgConfig::from_url(url)?))
}

#[async_trait]
impl BackendConfig for PgConfig {
    fn scheme(&self) -> &str {
        self.url_scheme()
    }

    fn to_url(&self) -> String {
        PgConfig::to_url(self)
    }

    fn redacted_url(&self) -> String {
        PgConfig::redacted_url(self)
    }

    fn hosts(&self) -> Vec<HostPort> {
        PgConfig::hosts(self)
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn BackendConfig>> {
        Ok(Box::new(PgConfig::with_hosts(self.clone(), hosts)?))
    }

    fn clone_config(&self) -> Box<dyn BackendConfig> {
        Box::new(self.clone())
    }

    /// The lock backend the config chooses (`?backend=`) and [`PgStorage`](crate::PgStorage)
    /// on the same pool.
    async fn connect(&self) -> Result<Connected> {
        let db = PgConfig::connect(self.clone()).await?;
        Ok(Connected {
            backend: db.backend(),
            storage: Arc::new(db.storage()),
        })
    }

    /// Against raw sqlx on a pool of its own (see [`crate::baseline`]).
    async fn bench_kit(&self) -> Result<Option<BenchKit>> {
        crate::baseline::bench_kit(self).await.map(Some)
    }

    /// `pg_terminate_backend` on the sessions of configs tagged with
    /// `fencelock-chaos-<run_tag>` ([`PgSessionFaults`]).
    async fn session_faults(&self, run_tag: &str) -> Result<Option<Arc<dyn SessionFaults>>> {
        let faults = PgSessionFaults::open(self, run_tag).await?;
        Ok(Some(Arc::new(faults)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_scheme_parses_round_trips_and_hides_the_password() {
        for scheme in SCHEMES {
            let url = format!(
                "{}://app:hunter2@db.internal:5433/orders?backend=advisory&schema=locks",
                scheme.name
            );
            let config = (scheme.parse)(&url).unwrap();
            assert_eq!(config.scheme(), scheme.name);
            assert_eq!(config.to_url(), url);
            let again = (scheme.parse)(&config.to_url()).unwrap();
            assert_eq!(again.to_url(), url);
            let redacted = config.redacted_url();
            assert!(!redacted.contains("hunter2"), "{redacted}");
            assert!(redacted.contains("app:***@db.internal"), "{redacted}");
            assert!(!format!("{config:?}").contains("hunter2"));
            assert_eq!(config.hosts(), vec![HostPort::new("db.internal", 5433)]);
            assert!(config.is_shared());
        }
    }

    #[test]
    fn the_scheme_is_the_one_printed() {
        let config = (SCHEMES[0].parse)("POSTGRESQL://h/db").unwrap();
        assert_eq!(config.scheme(), "postgresql");
        assert!(config.to_url().starts_with("postgresql://"));
    }

    #[test]
    fn hosts_are_replaced_through_the_trait() {
        let config = (SCHEMES[0].parse)("postgres://u:pw@db/test?schema=s").unwrap();
        let moved = config.with_hosts(&[HostPort::new("::1", 6432)]).unwrap();
        assert_eq!(moved.to_url(), "postgres://u:pw@[::1]:6432/test?schema=s");
        assert!(moved.downcast_ref::<PgConfig>().is_some());
        assert!(config.with_hosts(&[]).is_err());
        assert_eq!(config.clone_config().to_url(), config.to_url());
    }
}
