//! Shared (reader) locks on one server or a cluster: the read phase of DESIGN section 4.1,
//! one Lua script per operation over the writer's lock key (which holds the phase's fence
//! while it lives), the key's readers hash and the one token counter
//! (`scripts/read_phase.lua` says what each holds).

use std::time::Duration;

use fencelock_core::{Lease, LockKey, OwnerId, ReadPhase, Result, valid_until, validate_ttl};
use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use crate::backend::Locks;
use crate::codec::{lock_value, parse_lock_value, ttl_millis};
use crate::error::protocol;
use crate::outcome::{extended, finish, finish_grant, released};
use crate::scripts::SCRIPTS;

impl Locks {
    pub(crate) async fn try_acquire_shared(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities)?;
        let backend = self.conn.backend;
        let span = tracing::debug_span!("try_acquire_shared", backend, key = %key, ?ttl, token = Empty, outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.acquire_shared.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(key))
                .key(self.conn.keys.token(key))
                .key(self.conn.keys.readers(key))
                .arg(reader.to_string())
                .arg(ttl_millis(ttl))
                .arg(OwnerId::random().to_string());
            let mut conn = self.conn.link.clone();
            let sent_at = Instant::now();
            let reply: Option<String> = self
                .conn
                .call("acquire_shared", invocation.invoke_async(&mut conn))
                .await?;
            let Some(fence) = reply else {
                return Ok(None);
            };
            let fence = parse_lock_value(backend, &fence)?;
            Ok(Some(Lease {
                key: key.clone(),
                owner: fence.owner,
                token: fence.token,
                ttl,
                valid_until: valid_until(sent_at, ttl),
            }))
        }
        .instrument(span.clone())
        .await;
        finish_grant(&span, result)
    }

    pub(crate) async fn extend_shared(
        &self,
        lease: &Lease,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities)?;
        let span = tracing::debug_span!("extend_shared", backend = self.conn.backend, key = %lease.key, token = lease.token.get(), ?ttl, outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.extend_shared.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(&lease.key))
                .key(self.conn.keys.readers(&lease.key))
                .arg(lock_value(lease.owner, lease.token))
                .arg(reader.to_string())
                .arg(ttl_millis(ttl));
            let mut conn = self.conn.link.clone();
            let sent_at = Instant::now();
            let reply: i64 = self
                .conn
                .call("extend_shared", invocation.invoke_async(&mut conn))
                .await?;
            extended(
                self.conn.backend,
                "extend_shared",
                reply,
                (lease, ttl, sent_at),
            )
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }

    pub(crate) async fn release_shared(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        let span = tracing::debug_span!("release_shared", backend = self.conn.backend, key = %lease.key, token = lease.token.get(), outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.release_shared.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(&lease.key))
                .key(self.conn.keys.readers(&lease.key))
                .arg(lock_value(lease.owner, lease.token))
                .arg(reader.to_string())
                .arg(self.conn.keys.channel(&lease.key));
            let mut conn = self.conn.link.clone();
            let reply: i64 = self
                .conn
                .call("release_shared", invocation.invoke_async(&mut conn))
                .await?;
            released(self.conn.backend, "release_shared", reply)
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }

    pub(crate) async fn inspect_shared(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        let span = tracing::debug_span!("inspect_shared", backend = self.conn.backend, key = %key, outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.inspect_shared.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(key))
                .key(self.conn.keys.readers(key));
            let mut conn = self.conn.link.clone();
            let (fence, pttl, readers): (Option<String>, i64, usize) = self
                .conn
                .call("inspect_shared", invocation.invoke_async(&mut conn))
                .await?;
            let Some(fence) = fence else {
                return Ok(None);
            };
            // The phase expires with its last reader: one without a live reader is a phase
            // ending in this very millisecond.
            if readers == 0 {
                return Ok(None);
            }
            if pttl < 0 {
                return Err(protocol(
                    self.conn.backend,
                    "a read phase whose lock has no expiry was not written by fencelock",
                ));
            }
            Ok(Some(ReadPhase {
                fence: parse_lock_value(self.conn.backend, &fence)?,
                readers,
                remaining: Duration::from_millis(pttl.unsigned_abs()),
            }))
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }
}
