//! One lock space per key: the schema's lock mechanism, bound by its first grant.

use fencelock_core::{Error, Result};

use super::{BACKEND, PgDatabase};
use crate::PgBackendKind;
use crate::error::timed;
use crate::exec::{Arg, Protocol};

impl PgDatabase {
    /// `Ok` if this schema serves `kind`'s grants: its recorded mechanism is `kind`, or none
    /// was recorded and `kind` is recorded now. Otherwise [`Error::InvalidConfig`] naming the
    /// schema and the mechanism it is bound to: holders of the lease backend and of the
    /// advisory backend do not see each other, so one schema serves one of them (DESIGN 5.3).
    pub(crate) async fn serves(&self, kind: PgBackendKind) -> Result<()> {
        let bound = *self
            .inner
            .mechanism
            .get_or_try_init(|| async {
                // Once per database: nothing to gain from preparing it (and a prepared
                // statement here would be one more name for a misconfigured pooler to clash
                // on). No row only when another process recorded one after this statement's
                // snapshot: the second time sees it.
                for _ in 0..2 {
                    let mechanism: Option<String> = timed(
                        BACKEND,
                        self.inner.timeout,
                        self.inner.sql.mechanism_bind.scalar_optional(
                            Protocol::Simple,
                            &self.inner.pool,
                            &[Arg::Text(kind.as_str())],
                        ),
                    )
                    .await?;
                    if let Some(mechanism) = mechanism {
                        return mechanism.parse::<PgBackendKind>();
                    }
                }
                Err(crate::error::protocol(
                    BACKEND,
                    "the schema's lock mechanism could not be read",
                ))
            })
            .await?;
        self.check_mechanism(bound, kind)
    }

    /// The mechanism this schema is bound to, if this process already knows it.
    pub(crate) fn known_mechanism(&self) -> Option<PgBackendKind> {
        self.inner.mechanism.get().copied()
    }

    /// Records what a statement found the schema bound to.
    pub(crate) fn learned_mechanism(&self, bound: PgBackendKind) {
        let _ = self.inner.mechanism.set(bound);
    }

    fn check_mechanism(&self, bound: PgBackendKind, kind: PgBackendKind) -> Result<()> {
        if bound == kind {
            return Ok(());
        }
        let schema = &self.inner.schema;
        Err(Error::config(format!(
            "schema {schema:?} is bound to the {bound} lock mechanism (recorded in \
             {schema}.fencelock_mechanism by its first grant), so the {kind} backend refuses \
             to grant there: holders of the two would not exclude each other. Use \
             backend={bound} or another schema (to switch this one, delete that row while no \
             lock is held)"
        )))
    }
}
