//! The session fault of chaos runs: the server ends the workers' sessions with
//! `pg_terminate_backend`, as an operator or a failover does.

use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::tools::SessionFaults;
use fencelock_core::{BackendConfig, Error, Result};
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::{PgConfig, map_sqlx_error};

/// Ends the sessions named `$1`, all or about half (`$2`), never its own.
const TERMINATE: &str = include_str!("../sql/terminate_sessions.sql");

/// How long opening the admin session may take.
const WITHIN: Duration = Duration::from_secs(5);

/// `pg_terminate_backend` on the sessions of one chaos run: those whose `application_name`
/// is `fencelock-chaos-<run_tag>`, which [`tag`](SessionFaults::tag) gives the workers'
/// configs. The terminations go through an admin session of its own on the server.
#[derive(Debug, Clone)]
pub struct PgSessionFaults {
    /// One connection, opened on first use and again after a fault ended it.
    pool: PgPool,
    application_name: String,
}

impl PgSessionFaults {
    /// The application name of the sessions a run tagged `run_tag` ends.
    pub fn application_name_for(run_tag: &str) -> String {
        format!("fencelock-chaos-{run_tag}")
    }

    /// Opens the admin session on the server `config` names (reached directly, not through
    /// a fault proxy), for the sessions of run `run_tag`.
    ///
    /// One connection is made first, within 5 s, to check the server: a pool tries a refused
    /// connect again until its time-out and then says only that it timed out, not why.
    /// Refused credentials are [`Error::InvalidConfig`]; a server that is down or silent is
    /// [`Error::Unavailable`].
    pub async fn open(config: &PgConfig, run_tag: &str) -> Result<Self> {
        let options = config.connect_options();
        let context = format!("cannot open the admin session on {config}");
        match tokio::time::timeout(WITHIN, sqlx::ConnectOptions::connect(options)).await {
            Ok(Ok(first)) => {
                // Only the check: whether it closes cleanly changes nothing.
                let _ = tokio::time::timeout(WITHIN, sqlx::Connection::close(first)).await;
            }
            Ok(Err(e)) => return Err(map_sqlx_error("postgres", e).in_context(&context)),
            Err(_) => {
                return Err(Error::Unavailable {
                    backend: "postgres",
                    message: format!("{context}: no answer within {WITHIN:?}"),
                    source: None,
                });
            }
        }
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(WITHIN)
            .connect_lazy_with(options.clone());
        Ok(PgSessionFaults {
            pool,
            application_name: Self::application_name_for(run_tag),
        })
    }

    /// The application name of the sessions this ends.
    pub fn application_name(&self) -> &str {
        &self.application_name
    }
}

#[async_trait]
impl SessionFaults for PgSessionFaults {
    /// `config` named [`application_name`](Self::application_name) in `pg_stat_activity`.
    /// Only a [`PgConfig`] can be tagged: anything else is [`Error::InvalidConfig`].
    fn tag(&self, config: &dyn BackendConfig) -> Result<Box<dyn BackendConfig>> {
        let Some(pg) = config.downcast_ref::<PgConfig>() else {
            return Err(Error::config(format!(
                "pg_terminate_backend ends PostgreSQL sessions only; a {}:// config cannot \
                 be tagged for it",
                config.scheme()
            )));
        };
        Ok(Box::new(
            pg.clone().application_name(&self.application_name),
        ))
    }

    async fn end_sessions(&self, all: bool) -> Result<u64> {
        let ended: i64 = sqlx::query_scalar(TERMINATE)
            .bind(&self.application_name)
            .bind(all)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| map_sqlx_error("postgres", e).in_context("pg_terminate_backend"))?;
        // A count is never negative.
        Ok(u64::try_from(ended).unwrap_or(0))
    }

    fn label(&self) -> &'static str {
        "pg_terminate_backend"
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn only_postgres_configs_are_tagged() {
        let faults = PgSessionFaults {
            pool: PgPoolOptions::new().connect_lazy_with(
                PgConfig::from_url("postgres://h/db")
                    .unwrap()
                    .connect_options()
                    .clone(),
            ),
            application_name: PgSessionFaults::application_name_for("t1"),
        };
        assert_eq!(faults.label(), "pg_terminate_backend");
        let config = PgConfig::from_url("postgresql://u:pw@db/test?application_name=app").unwrap();
        let tagged = faults.tag(&config).unwrap();
        assert_eq!(
            tagged.to_url(),
            "postgresql://u:pw@db/test?application_name=fencelock-chaos-t1"
        );
        let tagged = tagged.downcast_ref::<PgConfig>().unwrap();
        assert_eq!(
            tagged.connect_options().get_application_name(),
            Some("fencelock-chaos-t1")
        );

        #[derive(Debug, Clone)]
        struct Other;
        #[async_trait]
        impl BackendConfig for Other {
            fn scheme(&self) -> &str {
                "other"
            }
            fn to_url(&self) -> String {
                "other://".into()
            }
            fn redacted_url(&self) -> String {
                self.to_url()
            }
            fn hosts(&self) -> Vec<fencelock_core::HostPort> {
                Vec::new()
            }
            fn with_hosts(&self, _: &[fencelock_core::HostPort]) -> Result<Box<dyn BackendConfig>> {
                Ok(Box::new(Other))
            }
            fn clone_config(&self) -> Box<dyn BackendConfig> {
                Box::new(Other)
            }
            async fn connect(&self) -> Result<fencelock_core::Connected> {
                Err(Error::config("not here"))
            }
        }
        let err = faults.tag(&Other).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
        assert!(err.to_string().contains("other://"), "{err}");
    }
}
