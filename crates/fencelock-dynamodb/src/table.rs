//! `DynamoTable`: the SDK client built from a config, and the table checked (or created).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TableDescription, TableStatus,
};
use fencelock_core::{Error, Result};
use tokio::time::{Instant, sleep};

use crate::backend::DynamoLockBackend;
use crate::config::DynamoConfig;
use crate::error::{BACKEND, CREATE_HINT, NOT_FOUND, map_dynamodb_error};
use crate::fence::DynamoFence;
use crate::item::build_error;
use crate::storage::DynamoStorage;

/// The partition key's attribute name, of type S: the only key the table may have.
pub const PARTITION_KEY: &str = "pk";

/// How long [`DynamoConfig::connect`] waits for a table it created to become active.
const CREATE_WAIT: Duration = Duration::from_secs(120);

/// How many attempts the SDK makes per request (its standard retry mode, with backoff, for
/// throttling, 5xx and connection errors). A retried conditional write that was applied the
/// first time meets its own write; every operation recognizes that from the item the failed
/// condition returns.
const ATTEMPTS: u32 = 3;

/// What every part of the backend shares: the client, the table, the key prefix.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) table: String,
    /// `table "locks" at http://..`: how errors name the table.
    pub(crate) label: String,
    pub(crate) prefix: String,
}

impl Shared {
    /// Maps an SDK error of the operation `what` ([`map_dynamodb_error`]).
    pub(crate) fn error<E>(
        &self,
        what: &str,
        error: aws_sdk_dynamodb::error::SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
    ) -> Error
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        map_dynamodb_error(BACKEND, what, &self.label, error)
    }
}

/// A connected DynamoDB table: hands out the lock backend and the fenced storage on it.
#[derive(Debug, Clone)]
pub struct DynamoTable {
    shared: Arc<Shared>,
}

impl DynamoTable {
    pub(crate) async fn connect(config: &DynamoConfig) -> Result<Self> {
        let region = match config.region_setting() {
            Some(region) => region.to_owned(),
            None => env("AWS_REGION")
                .or_else(|| env("AWS_DEFAULT_REGION"))
                .ok_or_else(|| {
                    Error::config(format!(
                        "{config}: no region: add `?region=..` to the URL or set AWS_REGION"
                    ))
                })?,
        };
        let credentials = match config.credentials() {
            Some((key, secret)) => Credentials::new(key, secret, None, None, "fencelock-url"),
            None => match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
                (Some(key), Some(secret)) => Credentials::new(
                    key,
                    secret,
                    env("AWS_SESSION_TOKEN"),
                    None,
                    "fencelock-environment",
                ),
                _ => {
                    return Err(Error::config(format!(
                        "{config}: no credentials: put `access_key_id:secret_access_key@` in \
                         the URL or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                    )));
                }
            },
        };
        let timeouts = TimeoutConfig::builder()
            .operation_timeout(config.operation_timeout)
            .connect_timeout(config.connect_timeout)
            .build();
        let mut sdk = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::v2026_01_12())
            .region(Region::new(region.clone()))
            .credentials_provider(credentials)
            .timeout_config(timeouts)
            .retry_config(RetryConfig::standard().with_max_attempts(ATTEMPTS));
        if let Some(endpoint) = config.endpoint_url() {
            sdk = sdk.endpoint_url(endpoint);
        }
        let shared = Shared {
            client: Client::from_conf(sdk.build()),
            table: config.table().to_owned(),
            label: config.label(&region),
            prefix: config.prefix_name().to_owned(),
        };
        let description = match describe(&shared).await? {
            Some(description) => description,
            None if config.creates_table() => create(&shared).await?,
            None => {
                return Err(Error::config(format!(
                    "{} does not exist: {CREATE_HINT}",
                    shared.label
                )));
            }
        };
        check_schema(&shared, &description)?;
        Ok(DynamoTable {
            shared: Arc::new(shared),
        })
    }

    /// The lock backend on this table. Each value keeps its own record of the lock versions
    /// it has seen (its clock for taking over an unreleased lock), so share one per process.
    pub fn backend(&self) -> DynamoLockBackend {
        DynamoLockBackend::new(self.shared.clone())
    }

    /// The fenced storage on this table.
    pub fn storage(&self) -> DynamoStorage {
        DynamoStorage::new(self.shared.clone())
    }

    /// The fence of the application's own items ([`DynamoFence`]), on this table's client:
    /// it writes any table that client may write, not only this one.
    pub fn fence(&self) -> DynamoFence {
        DynamoFence::new(self.shared.client.clone())
    }

    /// The SDK client, for the application's own requests on the same connection pool.
    pub fn client(&self) -> &Client {
        &self.shared.client
    }

    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.shared.table
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The table's description; `None` when it does not exist.
async fn describe(shared: &Shared) -> Result<Option<TableDescription>> {
    match shared
        .client
        .describe_table()
        .table_name(&shared.table)
        .send()
        .await
    {
        Ok(output) => Ok(output.table().cloned()),
        Err(error) if error.code() == Some(NOT_FOUND) => Ok(None),
        Err(error) => Err(shared.error("DescribeTable", error)),
    }
}

/// Creates the table (on-demand capacity, the key `pk` of type S) and waits until it is
/// active. A table created by someone else meanwhile is waited for the same way.
async fn create(shared: &Shared) -> Result<TableDescription> {
    let build = |e| build_error(shared, "CreateTable", e);
    let created = shared
        .client
        .create_table()
        .table_name(&shared.table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(PARTITION_KEY)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(build)?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(PARTITION_KEY)
                .key_type(KeyType::Hash)
                .build()
                .map_err(build)?,
        )
        .send()
        .await;
    match created {
        Ok(_) => tracing::info!("created DynamoDB {}", shared.label),
        Err(error) if error.code() == Some("ResourceInUseException") => {}
        Err(error) => return Err(shared.error("CreateTable", error)),
    }
    let deadline = Instant::now() + CREATE_WAIT;
    loop {
        if let Some(description) = describe(shared).await?
            && description.table_status() == Some(&TableStatus::Active)
        {
            return Ok(description);
        }
        if Instant::now() >= deadline {
            return Err(Error::Unavailable {
                backend: BACKEND,
                message: format!(
                    "{} was created but is not ACTIVE after {CREATE_WAIT:?}",
                    shared.label
                ),
                source: None,
            });
        }
        sleep(Duration::from_millis(500)).await;
    }
}

/// Refuses a table whose key is not one partition key `pk` of type S, naming what it has.
fn check_schema(shared: &Shared, description: &TableDescription) -> Result<()> {
    let keys = description.key_schema();
    let type_of = |name: &str| {
        description
            .attribute_definitions()
            .iter()
            .find(|d| d.attribute_name() == name)
            .map(|d| d.attribute_type().as_str().to_owned())
            .unwrap_or_else(|| "?".to_owned())
    };
    let fits = matches!(keys, [only] if only.attribute_name() == PARTITION_KEY
        && *only.key_type() == KeyType::Hash
        && type_of(PARTITION_KEY) == "S");
    if fits {
        return Ok(());
    }
    let found: Vec<String> = keys
        .iter()
        .map(|k| {
            format!(
                "{} ({}, {})",
                k.attribute_name(),
                type_of(k.attribute_name()),
                k.key_type().as_str()
            )
        })
        .collect();
    Err(Error::config(format!(
        "{} has the key schema [{}]: fencelock needs exactly one partition key `{PARTITION_KEY}` \
         of type S (string) and no sort key; use another table",
        shared.label,
        found.join(", ")
    )))
}
