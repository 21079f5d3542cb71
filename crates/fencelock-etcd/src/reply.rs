//! Reading transaction replies: the revision they applied at, the ranges they read.

use etcd_client::{KeyValue, TxnOpResponse, TxnResponse};
use fencelock_core::{LostReason, Result};

use crate::error::protocol;
use crate::keys::parse_counter;
use crate::seen::CounterSeen;

/// A transaction's answer, and the `header.revision` at which it applied.
pub(crate) struct Applied {
    pub(crate) response: TxnResponse,
    pub(crate) revision: i64,
}

/// Checks a transaction's reply has a header.
pub(crate) fn applied(mut response: TxnResponse, what: &str) -> Result<Applied> {
    let revision = response
        .take_header()
        .map(|h| h.revision())
        .ok_or_else(|| protocol(what))?;
    Ok(Applied { response, revision })
}

/// The key-values read by the `N` range requests of the branch a transaction ran: every one
/// each range returned, in the order it asked for.
pub(crate) fn ranges<const N: usize>(
    response: &TxnResponse,
    what: &str,
) -> Result<[Vec<KeyValue>; N]> {
    let ranges: Vec<Vec<KeyValue>> = response
        .op_responses()
        .into_iter()
        .map(|op| match op {
            TxnOpResponse::Get(mut get) => Ok(get.take_kvs()),
            _ => Err(protocol(what)),
        })
        .collect::<Result<_>>()?;
    ranges.try_into().map_err(|_| protocol(what))
}

/// The key-values read by the `N` range requests of the branch a transaction ran: the first
/// of each range, if any.
pub(crate) fn reads<const N: usize>(
    response: &TxnResponse,
    what: &str,
) -> Result<[Option<KeyValue>; N]> {
    Ok(ranges::<N>(response, what)?.map(|range| range.into_iter().next()))
}

/// A counter as read (absent: no token yet).
pub(crate) fn counter_seen(kv: Option<&KeyValue>) -> Result<CounterSeen> {
    Ok(match kv {
        Some(kv) => CounterSeen {
            last: parse_counter(kv.value())?.get(),
            mod_revision: kv.mod_revision(),
        },
        None => CounterSeen::default(),
    })
}

/// Why a grant whose lock key now reads as `kv` is lost.
pub(crate) fn lost_reason(kv: Option<&KeyValue>) -> LostReason {
    match kv {
        None => LostReason::NotHeld,
        Some(_) => LostReason::Superseded,
    }
}
