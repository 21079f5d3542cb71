//! `dynamodb://`: [`DynamoConfig`] as a [`BackendConfig`], and the scheme this crate owns.

use std::sync::Arc;

use fencelock_core::tools::BenchKit;
use fencelock_core::{BackendConfig, Connected, HostPort, OwnerId, Result, Scheme, async_trait};

use crate::baseline::{DynamoBaseline, DynamoCleanup};
use crate::config::DynamoConfig;

/// The scheme this crate owns, `dynamodb://`, to register in a
/// [`Schemes`](fencelock_core::Schemes) registry.
pub const SCHEMES: &[Scheme] = &[spawns(
    Scheme::new(
        "dynamodb",
        "a DynamoDB table (or a local emulator through ?endpoint=)",
        |url| Ok(Box::new(DynamoConfig::from_url(url)?)),
    )
    .with_example("dynamodb://fencelock-locks?region=eu-west-1"),
)];

/// With the `servers` feature, `dynamodb://` can start a moto server for fault runs.
#[cfg(feature = "servers")]
const fn spawns(scheme: Scheme) -> Scheme {
    scheme.with_spawn(crate::spawn::dynamodb)
}

#[cfg(not(feature = "servers"))]
const fn spawns(scheme: Scheme) -> Scheme {
    scheme
}

#[async_trait]
impl BackendConfig for DynamoConfig {
    fn scheme(&self) -> &str {
        "dynamodb"
    }

    fn to_url(&self) -> String {
        DynamoConfig::to_url(self)
    }

    fn redacted_url(&self) -> String {
        DynamoConfig::redacted_url(self)
    }

    fn hosts(&self) -> Vec<HostPort> {
        DynamoConfig::hosts(self)
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn BackendConfig>> {
        Ok(Box::new(DynamoConfig::with_hosts(self.clone(), hosts)?))
    }

    fn clone_config(&self) -> Box<dyn BackendConfig> {
        Box::new(self.clone())
    }

    async fn connect(&self) -> Result<Connected> {
        let table = DynamoConfig::connect(self).await?;
        Ok(Connected {
            backend: Arc::new(table.backend()),
            storage: Arc::new(table.storage()),
        })
    }

    /// fencelock's items under the config's prefix, against a conditional `PutItem` and a
    /// `DeleteItem` on the same client under `<prefix>bench-raw/<run id>/`
    /// ([`DynamoBaseline`]). Named `dynamodb` in reports; the cleanup deletes the run's lock,
    /// data and chunk items ([`DynamoCleanup`]).
    async fn bench_kit(&self) -> Result<Option<BenchKit>> {
        let table = DynamoConfig::connect(self).await?;
        let fenced = Connected {
            backend: Arc::new(table.backend()),
            storage: Arc::new(table.storage()),
        };
        let run = format!("{:016x}", OwnerId::random().as_u128() as u64);
        let baseline = DynamoBaseline::new(table.shared(), &run);
        let cleanup = DynamoCleanup::new(table.shared());
        Ok(Some(
            BenchKit::new("dynamodb", fenced, Arc::new(baseline)).cleanup(Arc::new(cleanup)),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_scheme_parses_round_trips_and_hides_the_secret() {
        let [scheme] = SCHEMES else {
            panic!("one scheme");
        };
        let url =
            "dynamodb://AKID:s3cret@locks?region=eu-west-1&endpoint=http%3A%2F%2F127.0.0.1%3A5000";
        let config = (scheme.parse)(url).unwrap();
        assert_eq!(config.scheme(), scheme.name);
        assert_eq!(config.to_url(), url);
        assert_eq!((scheme.parse)(&config.to_url()).unwrap().to_url(), url);
        let shown = config.redacted_url();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.starts_with("dynamodb://AKID:***@locks?"), "{shown}");
        assert!(config.is_shared());
        assert_eq!(config.hosts(), vec![HostPort::new("127.0.0.1", 5000)]);
        let moved = config
            .with_hosts(&[HostPort::new("127.0.0.1", 6000)])
            .unwrap();
        assert!(
            moved.to_url().contains("127.0.0.1%3A6000"),
            "{}",
            moved.to_url()
        );
        assert!(config.with_hosts(&[]).is_err());
        assert!(
            config
                .clone_config()
                .downcast_ref::<DynamoConfig>()
                .is_some()
        );
        let example = scheme.example.unwrap();
        assert_eq!((scheme.parse)(example).unwrap().to_url(), example);
    }
}
