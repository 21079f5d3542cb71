//! The SQL fencelock runs, with its own objects qualified by the configured schema.
//!
//! The files under `sql/` write `{schema}.fencelock_...`; [`Statements::new`] replaces
//! `{schema}` with the quoted schema name once per database. Nothing fencelock runs depends on
//! the session's `search_path`, so the application's own connections (and a transaction-mode
//! pooler) can be used as they are, and unqualified names in the caller's SQL keep meaning
//! the caller's tables. `{lease_grant}` stands for the CTEs of `sql/lease_grant.sql`, shared by
//! the plain and the queued lease try, and `{advisory_grant}` for those of
//! `sql/advisory_grant.sql`, shared by the plain and the queued advisory try.

use crate::config::validate_schema;
use crate::exec::Sql;
use fencelock_core::Result;

/// The grant's CTEs, written into the plain and the queued try where they name
/// `{lease_grant}`.
const LEASE_GRANT: &str = include_str!("../sql/lease_grant.sql");
/// The advisory grant's CTEs, written into the plain and the queued try where they name
/// `{advisory_grant}`.
const ADVISORY_GRANT: &str = include_str!("../sql/advisory_grant.sql");

/// Every statement, rendered for one schema.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) advance_token: Sql,
    pub(crate) advisory_acquire: Sql,
    pub(crate) advisory_acquire_queued: Sql,
    pub(crate) advisory_acquire_placed: Sql,
    pub(crate) advisory_keep_places: Sql,
    pub(crate) advisory_leave: Sql,
    pub(crate) advisory_extend: Sql,
    pub(crate) advisory_held: Sql,
    pub(crate) advisory_inspect: Sql,
    pub(crate) advisory_inspect_queue: Sql,
    pub(crate) advisory_ping: Sql,
    pub(crate) advisory_release: Sql,
    pub(crate) advisory_pass: Sql,
    pub(crate) lease_acquire: Sql,
    pub(crate) lease_acquire_all: Sql,
    pub(crate) lease_acquire_queued: Sql,
    pub(crate) lease_acquire_placed: Sql,
    pub(crate) lease_leave: Sql,
    pub(crate) lease_keep_places: Sql,
    pub(crate) lease_extend: Sql,
    pub(crate) lease_inspect: Sql,
    pub(crate) lease_inspect_queue: Sql,
    pub(crate) lease_release: Sql,
    pub(crate) lease_pass: Sql,
    pub(crate) new_epoch: Sql,
    pub(crate) storage_apply: Sql,
    pub(crate) storage_peek: Sql,
    pub(crate) xact_lock: Sql,
    pub(crate) xact_claim: Sql,
    pub(crate) token_grant: Sql,
    pub(crate) fence_admit: Sql,
    pub(crate) fence_current: Sql,
    pub(crate) fence_present: Sql,
    pub(crate) fence_lower: Sql,
    pub(crate) guard_table: Sql,
    pub(crate) unguard_table: Sql,
    pub(crate) advisory_read_acquire: Sql,
    pub(crate) advisory_read_extend: Sql,
    pub(crate) advisory_read_release: Sql,
    pub(crate) advisory_read_inspect: Sql,
    pub(crate) lease_read_acquire: Sql,
    pub(crate) lease_read_extend: Sql,
    pub(crate) lease_read_release: Sql,
    pub(crate) lease_read_inspect: Sql,
}

impl Statements {
    /// The statements for `schema`, which must be a valid schema name.
    pub(crate) fn new(schema: &str) -> Result<Self> {
        validate_schema(schema)?;
        let quoted = quote_ident(schema);
        let render = |sql: &str| Sql::new(&sql.replace("{schema}", &quoted));
        // The grant's CTEs, shared by the plain and the queued try.
        let grant = |sql: &str| render(&sql.replace("{lease_grant}", LEASE_GRANT));
        let advisory_grant = |sql: &str| render(&sql.replace("{advisory_grant}", ADVISORY_GRANT));
        Ok(Statements {
            advance_token: render(include_str!("../sql/advance_token.sql")),
            advisory_acquire: advisory_grant(include_str!("../sql/advisory_acquire.sql")),
            advisory_acquire_queued: advisory_grant(include_str!(
                "../sql/advisory_acquire_queued.sql"
            )),
            advisory_acquire_placed: render(include_str!("../sql/advisory_acquire_placed.sql")),
            advisory_keep_places: render(include_str!("../sql/advisory_keep_places.sql")),
            advisory_leave: render(include_str!("../sql/advisory_leave.sql")),
            advisory_extend: render(include_str!("../sql/advisory_extend.sql")),
            advisory_held: render(include_str!("../sql/advisory_held.sql")),
            advisory_inspect: render(include_str!("../sql/advisory_inspect.sql")),
            advisory_inspect_queue: render(include_str!("../sql/advisory_inspect_queue.sql")),
            advisory_ping: render(include_str!("../sql/advisory_ping.sql")),
            advisory_release: render(include_str!("../sql/advisory_release.sql")),
            advisory_pass: render(include_str!("../sql/advisory_pass.sql")),
            lease_acquire: grant(include_str!("../sql/lease_acquire.sql")),
            lease_acquire_all: render(include_str!("../sql/lease_acquire_all.sql")),
            lease_acquire_queued: grant(include_str!("../sql/lease_acquire_queued.sql")),
            lease_acquire_placed: render(include_str!("../sql/lease_acquire_placed.sql")),
            lease_leave: render(include_str!("../sql/lease_leave.sql")),
            lease_keep_places: render(include_str!("../sql/lease_keep_places.sql")),
            lease_extend: render(include_str!("../sql/lease_extend.sql")),
            lease_inspect: render(include_str!("../sql/lease_inspect.sql")),
            lease_inspect_queue: render(include_str!("../sql/lease_inspect_queue.sql")),
            lease_release: render(include_str!("../sql/lease_release.sql")),
            lease_pass: render(include_str!("../sql/lease_pass.sql")),
            new_epoch: render(include_str!("../sql/new_epoch.sql")),
            storage_apply: render(include_str!("../sql/storage_apply.sql")),
            storage_peek: render(include_str!("../sql/storage_peek.sql")),
            xact_lock: render(include_str!("../sql/xact_lock.sql")),
            xact_claim: render(include_str!("../sql/xact_claim.sql")),
            token_grant: render(include_str!("../sql/token_grant.sql")),
            fence_admit: render(include_str!("../sql/fence_admit.sql")),
            fence_current: render(include_str!("../sql/fence_current.sql")),
            fence_present: render(include_str!("../sql/fence_present.sql")),
            fence_lower: render(include_str!("../sql/fence_lower.sql")),
            guard_table: render(include_str!("../sql/guard_table.sql")),
            unguard_table: render(include_str!("../sql/unguard_table.sql")),
            advisory_read_acquire: render(include_str!("../sql/advisory_read_acquire.sql")),
            advisory_read_extend: render(include_str!("../sql/advisory_read_extend.sql")),
            advisory_read_release: render(include_str!("../sql/advisory_read_release.sql")),
            advisory_read_inspect: render(include_str!("../sql/advisory_read_inspect.sql")),
            lease_read_acquire: render(include_str!("../sql/lease_read_acquire.sql")),
            lease_read_extend: render(include_str!("../sql/lease_read_extend.sql")),
            lease_read_release: render(include_str!("../sql/lease_read_release.sql")),
            lease_read_inspect: render(include_str!("../sql/lease_read_inspect.sql")),
        })
    }
}

/// A schema name as a quoted SQL identifier. Valid names (`[a-z_][a-z0-9_]*`) hold no quote,
/// so quoting only protects names that are also keywords (`user`, `select`).
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_fencelock_object_is_qualified() {
        let sql = Statements::new("user").unwrap();
        for statement in [
            &sql.advance_token,
            &sql.lease_acquire,
            &sql.lease_acquire_all,
            &sql.advisory_acquire,
            &sql.advisory_acquire_queued,
            &sql.advisory_acquire_placed,
            &sql.advisory_keep_places,
            &sql.advisory_leave,
            &sql.storage_apply,
            &sql.xact_lock,
            &sql.token_grant,
            &sql.new_epoch,
            &sql.advisory_inspect,
            &sql.advisory_inspect_queue,
            &sql.xact_claim,
            &sql.fence_admit,
            &sql.guard_table,
            &sql.advisory_read_acquire,
            &sql.advisory_read_extend,
            &sql.advisory_read_release,
            &sql.advisory_read_inspect,
            &sql.lease_inspect,
            &sql.lease_inspect_queue,
            &sql.lease_pass,
            &sql.advisory_pass,
            &sql.lease_read_acquire,
            &sql.lease_read_extend,
            &sql.lease_read_release,
            &sql.lease_read_inspect,
        ] {
            let statement = statement.text();
            assert!(!statement.contains("{schema}"), "{statement}");
            for (at, _) in statement.match_indices("fencelock_") {
                let before = &statement[..at];
                // In SQL code (not comments) every fencelock object follows `"user".`.
                let line = before.rsplit('\n').next().unwrap_or_default();
                if !line.trim_start().starts_with("--") {
                    assert!(before.ends_with("\"user\"."), "unqualified: {statement}");
                }
            }
        }
        assert!(Statements::new("Bad-Name").is_err());
    }

    #[test]
    fn dollar_signs_are_placeholders_only() {
        // The simple protocol writes parameters in at every `$n`: a `$` anywhere else (dollar
        // quoting, a literal) would be cut wrongly.
        for file in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/sql")).unwrap() {
            let path = file.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines().filter(|l| !l.trim_start().starts_with("--")) {
                for (at, _) in line.match_indices('$') {
                    let next = line[at + 1..].chars().next();
                    assert!(
                        next.is_some_and(|c| c.is_ascii_digit() && c != '0'),
                        "{}: a `$` that is not a placeholder: {line}",
                        path.display()
                    );
                }
            }
        }
    }
}
