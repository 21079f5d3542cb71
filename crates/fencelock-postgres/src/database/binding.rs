//! One lock space per key: the schema's lock mechanism, bound by its first grant and checked
//! by every grant.

use fencelock_core::{Error, Result};

use super::PgDatabase;
use crate::PgBackendKind;

impl PgDatabase {
    /// `Ok` if the `bound` column of a `kind` grant (the schema's lock mechanism, as
    /// `fencelock_bind_mechanism` read or recorded it in the grant's own statement) is `kind`.
    /// Otherwise [`Error::InvalidConfig`] naming the schema and the mechanism it is bound to:
    /// holders of the lease backend and of the advisory backend do not see each other, so one
    /// schema serves one of them (DESIGN 5.3). The grant statement granted nothing then.
    ///
    /// Nothing of this is remembered: the binding row may be deleted (while no lock is held)
    /// and the schema bound to the other mechanism, so every grant looks again.
    pub(crate) fn check_bound(&self, kind: PgBackendKind, bound: Option<&str>) -> Result<()> {
        let bound = match bound.map(str::parse::<PgBackendKind>) {
            Some(Ok(bound)) => bound,
            Some(Err(_)) | None => {
                return Err(crate::error::protocol(
                    super::BACKEND,
                    "the schema's lock mechanism could not be read",
                ));
            }
        };
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
