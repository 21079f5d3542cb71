//! The sweep of a run's keys on Redis servers: `SCAN ... MATCH` on fencelock's key names under
//! the run's key prefix, then `DEL`.

use async_trait::async_trait;
use fencelock_core::tools::Cleanup;
use fencelock_core::{LockKey, Result};

use crate::config::RedisConfig;
use crate::error::{REDIS, map_error};
use crate::fence::hash_tag;
use crate::redlock::RedlockConfig;

/// Deletes fencelock's keys for a run's key prefix on every server of a kit:
/// `<prefix>:{<key>}:lock`, `:token` and `:data` for every key under the run's prefix, found
/// with `SCAN ... MATCH` (a run spreads its locks over many keys per subject, and `SCAN` finds
/// them without a list).
#[derive(Debug)]
pub(crate) struct RedisCleanup {
    prefix: String,
    servers: Vec<RedisConfig>,
}

impl RedisCleanup {
    /// On `servers` (each once), for fencelock's key `prefix`.
    pub(crate) fn new<'a>(
        prefix: &str,
        servers: impl IntoIterator<Item = &'a RedisConfig>,
    ) -> Self {
        let mut distinct: Vec<RedisConfig> = Vec::new();
        for server in servers {
            if !distinct.iter().any(|s| s.to_url() == server.to_url()) {
                distinct.push(server.clone());
            }
        }
        RedisCleanup {
            prefix: prefix.to_owned(),
            servers: distinct,
        }
    }

    /// For a Redlock under key `prefix`: tokens on every node, locks too if a run stopped
    /// half way, data on the storage server; the one-node peer's keys are on the first node,
    /// under the same prefix.
    pub(crate) fn for_redlock(prefix: &str, config: &RedlockConfig) -> Self {
        Self::new(prefix, config.node_configs().iter().chain(config.storage()))
    }

    fn pattern(&self, key_prefix: &str) -> Result<String> {
        scan_pattern(&self.prefix, key_prefix)
    }

    async fn clean_server(&self, server: &RedisConfig, pattern: &str) -> Result<()> {
        let what = |step: &str| format!("{step} on {server}");
        let client = redis::Client::open(server.to_url())
            .map_err(|e| map_error(REDIS, e).in_context(&what("connect")))?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| map_error(REDIS, e).in_context(&what("connect")))?;
        let mut cursor: u64 = 0;
        loop {
            let (next, names): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(|e| map_error(REDIS, e).in_context(&what("SCAN")))?;
            if !names.is_empty() {
                let _: i64 = redis::cmd("DEL")
                    .arg(&names)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| map_error(REDIS, e).in_context(&what("DEL")))?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}

#[async_trait]
impl Cleanup for RedisCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        let pattern = self.pattern(key_prefix)?;
        // Every server is swept even when one fails; the first error is reported.
        let mut outcome = Ok(());
        for server in &self.servers {
            let cleaned = self.clean_server(server, &pattern).await;
            outcome = outcome.and(cleaned);
        }
        outcome
    }
}

/// The `SCAN` pattern of every key fencelock names, under its key `prefix`, after a key
/// starting with `key_prefix`: `<prefix>:` then the hash tag of the key, open-ended. The same
/// on one server and on a cluster, where the hash tag also picks the slot.
pub(super) fn scan_pattern(prefix: &str, key_prefix: &str) -> Result<String> {
    let tag = hash_tag(&LockKey::new(key_prefix)?);
    let open_tag = tag.strip_suffix('}').unwrap_or(&tag);
    Ok(format!(
        "{}:{}*",
        glob_escape(prefix),
        glob_escape(open_tag)
    ))
}

/// `text` with the characters `SCAN ... MATCH` reads as a glob (`*`, `?`, `[`, `]`, `\`)
/// escaped, so it matches itself only.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_pattern_matches_the_run_keys_literally() {
        let server = RedisConfig::from_url("redis://127.0.0.1:6379").unwrap();
        let cleanup = RedisCleanup::new("app*[1]", [&server, &server]);
        assert_eq!(cleanup.servers.len(), 1, "the same server once");
        assert_eq!(
            cleanup.pattern("fencelock-bench/00ff/").unwrap(),
            "app\\*\\[1\\]:{fencelock-bench/00ff/*"
        );
        assert_eq!(
            cleanup.pattern("run{1}%/").unwrap(),
            "app\\*\\[1\\]:{run%7B1%7D%25/*"
        );
    }

    #[test]
    fn a_redlock_is_swept_on_every_node_and_its_storage_once() {
        let urls = |cleanup: &RedisCleanup| -> Vec<String> {
            cleanup.servers.iter().map(RedisConfig::to_url).collect()
        };
        let config = RedlockConfig::from_url("redlock://:pw@h1:1,h2:2,h3:3").unwrap();
        let cleanup = RedisCleanup::for_redlock("fencelock", &config);
        assert_eq!(
            urls(&cleanup),
            [":pw@h1:1", ":pw@h2:2", ":pw@h3:3"].map(|h| format!("redis://{h}"))
        );
        assert_eq!(
            cleanup.pattern("run/").unwrap(),
            scan_pattern("fencelock", "run/").unwrap()
        );

        let apart = config
            .clone()
            .with_storage(RedisConfig::from_url("redis://h9:9").unwrap());
        let cleanup = RedisCleanup::for_redlock("fencelock", &apart);
        assert_eq!(cleanup.servers.len(), 4, "{:?}", urls(&cleanup));
        assert_eq!(cleanup.servers[3].to_url(), "redis://h9:9");

        let on_a_node = config.with_storage(RedisConfig::from_url("redis://:pw@h2:2").unwrap());
        let cleanup = RedisCleanup::for_redlock("fencelock", &on_a_node);
        assert_eq!(
            cleanup.servers.len(),
            3,
            "a node that keeps the data too, once"
        );
    }
}
