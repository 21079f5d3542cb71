//! `DynamoLockBackend`: one item per key, every grant one conditional `UpdateItem`.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use fencelock_core::{
    Capabilities, Error, FencingToken, Lease, LockBackend, LockInfo, LockKey, LostReason, OwnerId,
    Result, TimeAuthority, TokenGuarantee, WakeUp, async_trait, validate_floor, validate_ttl,
};
use tokio::time::Instant;

use crate::error::{BACKEND, protocol};
use crate::item::{
    Item, Written, get_number, get_owner, get_text, new_version, number, text, update,
};
use crate::seen::Observations;
use crate::table::{PARTITION_KEY, Shared};

/// The longest ttl accepted: one day. A holder that vanishes keeps its lock for up to
/// `ttl × DRIFT` on a contender's clock, so long leases cost availability.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// The shortest ttl accepted: 100 ms. The lease counts from before the request is sent, so a
/// shorter one would be spent mostly on the wire.
pub const MIN_TTL: Duration = Duration::from_millis(100);

/// The largest token handed out, 2^63 - 1, as on every other backend: a fence fits a signed
/// 64-bit column.
pub const LAST_TOKEN: u64 = i64::MAX.unsigned_abs();

/// The attributes of a lock item.
const TOK: &str = "tok";
const OWNER: &str = "owner";
const VER: &str = "ver";
const LEASE_MS: &str = "lease_ms";

/// The lock backend on one DynamoDB table: a lock is the item `pk = "<prefix>lock/<key>"`
/// with the attributes `tok` (the key's last token, never removed), `owner` (while held),
/// `ver` (a random version, new on every grant, extend and release) and `lease_ms`.
///
/// - **Grant**: one `UpdateItem` conditioned on `attribute_not_exists(owner)` (free or
///   released) — or, for a takeover, on `ver = :seen`, a version this process has seen
///   unchanged for `lease_ms × DRIFT` on its own monotonic clock — and on `tok < 2^63 - 1`;
///   it sets `owner`, `ver`, `lease_ms` and adds 1 to `tok`, returning the new token. The
///   lease's `valid_until` counts from before the request was sent.
/// - **Extend**: conditioned on `owner` and `tok` being the lease's; writes a new `ver`.
/// - **Release**: the same condition; removes `owner` and writes a new `ver`, keeping the
///   item and its counter.
///
/// Each failed condition returns the item as it was (`ALL_OLD`), so a request the SDK sent
/// again after an unanswered first try recognizes its own write (same owner, same version)
/// instead of reporting a held lock or a lost lease. Waiters poll with backoff: no queue, no
/// notification ([`WakeUp::Poll`], not fair). See DESIGN.md section 5.8 for why this is safe.
#[derive(Debug, Clone)]
pub struct DynamoLockBackend {
    shared: Arc<Shared>,
    seen: Arc<Observations>,
}

impl DynamoLockBackend {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        DynamoLockBackend {
            shared,
            seen: Arc::default(),
        }
    }

    fn pk(&self, key: &LockKey) -> String {
        format!("{}lock/{}", self.shared.prefix, key.as_str())
    }

    fn request(
        &self,
        pk: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .key(PARTITION_KEY, text(pk))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    fn token(&self, item: &Item) -> Result<FencingToken> {
        let tok = get_number(&self.shared, item, TOK)?
            .ok_or_else(|| protocol(&self.shared.label, "a lock item without `tok`"))?;
        FencingToken::new(tok)
            .filter(|t| t.get() <= LAST_TOKEN)
            .ok_or_else(|| protocol(&self.shared.label, &format!("token {tok} out of range")))
    }

    fn exhausted(&self, key: &LockKey) -> Error {
        Error::Backend {
            backend: BACKEND,
            message: format!(
                "the token counter of {key:?} in {} is exhausted (tokens stop at 2^63 - 1)",
                self.shared.label
            ),
            source: None,
        }
    }

    /// The owner, version and lease of a held lock item; `None` when it is free.
    fn holder(&self, item: &Item) -> Result<Option<(OwnerId, String, Duration)>> {
        let Some(owner) = get_owner(&self.shared, item, OWNER)? else {
            return Ok(None);
        };
        let version = get_text(&self.shared, item, VER)?
            .ok_or_else(|| protocol(&self.shared.label, "a held lock item without `ver`"))?;
        let lease = get_number(&self.shared, item, LEASE_MS)?
            .ok_or_else(|| protocol(&self.shared.label, "a held lock item without `lease_ms`"))?;
        Ok(Some((
            owner,
            version.to_owned(),
            Duration::from_millis(lease),
        )))
    }

    /// Removes `lease`'s owner if it still holds the lock: the release's request.
    async fn remove_owner(&self, lease: &Lease) -> Result<bool> {
        let pk = self.pk(&lease.key);
        let version = new_version();
        let request = self
            .request(&pk)
            .condition_expression("#owner = :o AND #tok = :t")
            .update_expression("REMOVE #owner SET #ver = :v")
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#tok", TOK)
            .expression_attribute_names("#ver", VER)
            .expression_attribute_values(":o", text(lease.owner.to_string()))
            .expression_attribute_values(":t", number(lease.token.get()))
            .expression_attribute_values(":v", text(&version));
        match update(&self.shared, "release", request).await? {
            Written::Applied(_) => Ok(true),
            // Our own earlier try of this release, applied but unanswered.
            Written::Refused(Some(old))
                if get_owner(&self.shared, &old, OWNER)?.is_none()
                    && get_text(&self.shared, &old, VER)? == Some(version.as_str()) =>
            {
                Ok(true)
            }
            Written::Refused(_) => Ok(false),
        }
    }
}

/// A ttl in whole milliseconds, rounded up (the lease a contender waits out is never shorter
/// than the holder's).
fn lease_ms(ttl: Duration) -> u64 {
    let ms = ttl.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[async_trait]
impl LockBackend for DynamoLockBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(
            TokenGuarantee::Durable,
            TimeAuthority::Client,
            WakeUp::Poll,
            MAX_TTL,
        )
        .with_min_ttl(MIN_TTL)
        .with_locks_survive_restart(true)
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        let pk = self.pk(key);
        let owner = OwnerId::random();
        let version = new_version();
        let seen = self.seen.takeover(&pk);
        let free = if seen.is_some() {
            "(attribute_not_exists(#owner) OR #ver = :seen)"
        } else {
            "attribute_not_exists(#owner)"
        };
        let mut request = self
            .request(&pk)
            .condition_expression(format!(
                "{free} AND (attribute_not_exists(#tok) OR #tok < :last)"
            ))
            .update_expression("SET #owner = :o, #ver = :v, #lease = :l ADD #tok :one")
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#tok", TOK)
            .expression_attribute_names("#ver", VER)
            .expression_attribute_names("#lease", LEASE_MS)
            .expression_attribute_values(":o", text(owner.to_string()))
            .expression_attribute_values(":v", text(&version))
            .expression_attribute_values(":l", number(lease_ms(ttl)))
            .expression_attribute_values(":one", number(1))
            .expression_attribute_values(":last", number(LAST_TOKEN))
            .return_values(ReturnValue::AllNew);
        if let Some(seen) = &seen {
            request = request.expression_attribute_values(":seen", text(seen));
        }
        let sent_at = Instant::now();
        let granted = match update(&self.shared, "grant", request).await? {
            Written::Applied(new) => self.token(&new)?,
            Written::Refused(Some(old)) => {
                let received = Instant::now();
                let holder = self.holder(&old)?;
                match holder {
                    // Our own earlier try of this grant, applied but unanswered.
                    Some((o, v, _)) if o == owner && v == version => self.token(&old)?,
                    _ if get_number(&self.shared, &old, TOK)? >= Some(LAST_TOKEN) => {
                        return Err(self.exhausted(key));
                    }
                    Some((_, v, lease)) => {
                        self.seen.observe(&pk, &v, lease, received);
                        return Ok(None);
                    }
                    None => return Ok(None),
                }
            }
            Written::Refused(None) => {
                return Err(protocol(
                    &self.shared.label,
                    "a grant's condition failed on a missing item",
                ));
            }
        };
        self.seen.forget(&pk);
        Ok(Some(Lease {
            key: key.clone(),
            owner,
            token: granted,
            ttl,
            valid_until: fencelock_core::valid_until(sent_at, ttl),
        }))
    }

    /// Renews the lease with a new record version, so a contender watching the lock starts
    /// its clock again. A lease past its `valid_until` is not renewed: it is released if it
    /// still holds the lock (nobody took it over yet) and reported lost, since a contender
    /// may take it over from then on.
    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        if !lease.is_valid() {
            // Best effort: a lock left behind is taken over after lease × DRIFT anyway.
            let _ = self.remove_owner(lease).await;
            return Err(Error::lease_lost(&lease.key, LostReason::DeadlinePassed));
        }
        let pk = self.pk(&lease.key);
        let version = new_version();
        let request = self
            .request(&pk)
            .condition_expression("#owner = :o AND #tok = :t")
            .update_expression("SET #ver = :v, #lease = :l")
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#tok", TOK)
            .expression_attribute_names("#ver", VER)
            .expression_attribute_names("#lease", LEASE_MS)
            .expression_attribute_values(":o", text(lease.owner.to_string()))
            .expression_attribute_values(":t", number(lease.token.get()))
            .expression_attribute_values(":v", text(&version))
            .expression_attribute_values(":l", number(lease_ms(ttl)));
        let sent_at = Instant::now();
        match update(&self.shared, "extend", request).await? {
            Written::Applied(_) => {}
            Written::Refused(Some(old)) => match self.holder(&old)? {
                // Our own earlier try of this extend, applied but unanswered.
                Some((o, v, _))
                    if o == lease.owner && v == version && self.token(&old)? == lease.token => {}
                Some(_) => return Err(Error::lease_lost(&lease.key, LostReason::Superseded)),
                None => return Err(Error::lease_lost(&lease.key, LostReason::NotHeld)),
            },
            Written::Refused(None) => {
                return Err(Error::lease_lost(&lease.key, LostReason::NotHeld));
            }
        }
        Ok(Lease {
            ttl,
            valid_until: fencelock_core::valid_until(sent_at, ttl),
            ..lease.clone()
        })
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.remove_owner(lease).await
    }

    /// The holder as this process sees it. `remaining` is the lease less the time this
    /// process has seen the lock's current version (an upper bound of the holder's own time
    /// left); a lock whose version it has seen unchanged for the lease × DRIFT is reported
    /// free, since the next grant here may take it over.
    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        let pk = self.pk(key);
        let output = self
            .shared
            .client
            .get_item()
            .table_name(&self.shared.table)
            .key(PARTITION_KEY, text(&pk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.shared.error("inspect", e))?;
        let received = Instant::now();
        let mut info = LockInfo::new(key.clone());
        let Some(item) = output.item else {
            return Ok(info);
        };
        info.last_token = match get_number(&self.shared, &item, TOK)? {
            Some(_) => Some(self.token(&item)?),
            None => None,
        };
        if let (Some((owner, version, lease)), Some(token)) = (self.holder(&item)?, info.last_token)
        {
            let watched = self.seen.observe(&pk, &version, lease, received);
            if !watched.takeover {
                info.holder = Some(fencelock_core::Fence::new(token, owner));
                info.remaining = Some(watched.lease.saturating_sub(watched.for_how_long));
            }
        }
        Ok(info)
    }

    /// Raises `tok` to `floor` when it is below (creating the item, free, for a key never
    /// used), in one conditional `UpdateItem`; returns the counter afterwards.
    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        validate_floor(floor, LAST_TOKEN, "a DynamoDB lock item's counter")?;
        let pk = self.pk(key);
        let request = self
            .request(&pk)
            .condition_expression("attribute_not_exists(#tok) OR #tok < :floor")
            .update_expression("SET #tok = :floor")
            .expression_attribute_names("#tok", TOK)
            .expression_attribute_values(":floor", number(floor.get()))
            .return_values(ReturnValue::AllNew);
        match update(&self.shared, "advance_token", request).await? {
            Written::Applied(new) => self.token(&new),
            Written::Refused(Some(old)) => self.token(&old),
            Written::Refused(None) => Err(protocol(
                &self.shared.label,
                "advance_token's condition failed on a missing item",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_round_up_to_whole_milliseconds() {
        assert_eq!(lease_ms(Duration::from_millis(300)), 300);
        assert_eq!(lease_ms(Duration::from_micros(300_001)), 301);
        assert_eq!(lease_ms(MAX_TTL), 86_400_000);
    }
}
