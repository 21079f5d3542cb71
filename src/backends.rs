//! The built-in backends, one row each.
//!
//! Every place the facade names a built-in backend comes from the row below: its module
//! (`fencelock::redis`), the Cargo feature that brings it, the schemes it registers (known by
//! name even in a build without the feature, so a spec of one is told which feature to turn
//! on), and the line the docs show. Adding a backend is one row here and its optional
//! dependency and feature in `Cargo.toml`; CI reads the features from `Cargo.toml` and a test
//! checks that the two agree.

/// Calls `$then!` with the table of built-in backends. A row is
/// `module = crate, "feature", kind ["scheme", ...], "docs";` where `kind` is `lock` (the crate
/// exports `SCHEMES`: lock backends with their storage) or `storage` (it exports
/// `STORAGE_SCHEMES`: fenced storage that takes its tokens from any lock backend).
macro_rules! built_in_backends {
    ($then:ident) => {
        $then! {
            memory = fencelock_memory, "memory", lock ["memory"],
                "The in-process backend (the default).";
            redis = fencelock_redis, "redis",
                lock ["redis", "rediss", "redlock", "redis+cluster", "rediss+cluster"],
                "The Redis backends (one node, Redlock over N nodes, Redis Cluster) and fenced storage \
                 (`rediss://` with the `tls` feature).";
            postgres = fencelock_postgres, "postgres", lock ["postgres", "postgresql"],
                "The PostgreSQL backends (lease table, advisory locks, transactions, fenced storage).";
            mysql = fencelock_mysql, "mysql", lock ["mysql", "mariadb"],
                "The MySQL / MariaDB backend (`GET_LOCK` sessions, fenced storage, the user's own tables).";
            etcd = fencelock_etcd, "etcd", lock ["etcd"],
                "The etcd backend and fenced storage.";
            zookeeper = fencelock_zookeeper, "zookeeper", lock ["zookeeper"],
                "The ZooKeeper backend and fenced storage.";
            dynamodb = fencelock_dynamodb, "dynamodb", lock ["dynamodb"],
                "The DynamoDB backend (one conditional write per grant, the token in the lock item) \
                 and fenced storage.";
            object_store = fencelock_object_store, "object-store", storage ["s3", "memory-objects"],
                "Fenced writes to object storage through conditional puts (S3 and S3-compatible \
                 servers, the in-memory store), with the lock from any backend.";
        }
    };
}

/// The facade's module of each backend this build has: `fencelock::<module>`.
macro_rules! re_export {
    ($($module:ident = $krate:ident, $feature:literal, $kind:ident [$($scheme:literal),+], $doc:literal;)+) => {
        $(
            #[doc = $doc]
            #[cfg(feature = $feature)]
            #[doc(inline)]
            pub use $krate as $module;
        )+
    };
}

/// Every built-in scheme with the feature that brings it and whether it is storage only,
/// whether or not this build has it.
macro_rules! scheme_features {
    (@lock) => { false };
    (@storage) => { true };
    ($($module:ident = $krate:ident, $feature:literal, $kind:ident [$($scheme:literal),+], $doc:literal;)+) => {
        &[$($(($scheme, $feature, scheme_features!(@$kind)),)+)+]
    };
}

/// Registers the schemes of every built-in backend this build has into `$schemes`.
macro_rules! register_built_in {
    (@lock $krate:ident, $schemes:ident) => {
        for scheme in $krate::SCHEMES {
            // The built-in names are distinct and well-formed (a unit test registers them all).
            let _ = $schemes.register(*scheme);
        }
    };
    (@storage $krate:ident, $schemes:ident) => {
        for scheme in $krate::STORAGE_SCHEMES {
            let _ = $schemes.register_storage(*scheme);
        }
    };
    ($($module:ident = $krate:ident, $feature:literal, $kind:ident [$($scheme:literal),+], $doc:literal;)+) => {
        |schemes: &mut fencelock_core::Schemes| {
            $(
                #[cfg(feature = $feature)]
                register_built_in!(@$kind $krate, schemes);
            )+
            let _ = schemes;
        }
    };
}

/// The docs' table of built-in backends: schemes, feature, what each is.
macro_rules! backend_table {
    (@lock) => { "" };
    (@storage) => { "(storage only) " };
    ($($module:ident = $krate:ident, $feature:literal, $kind:ident [$($scheme:literal),+], $doc:literal;)+) => {
        concat!(
            "| module | feature | schemes | what it is |\n|---|---|---|---|\n",
            $(
                "| `fencelock::", stringify!($module), "` | `", $feature, "` | ",
                $("`", $scheme, "://` ",)+
                backend_table!(@$kind), " | ", $doc, " |\n",
            )+
        )
    };
}

/// The built-in backends' modules and features, for the test that `Cargo.toml` agrees.
#[cfg(test)]
macro_rules! modules_and_features {
    ($($module:ident = $krate:ident, $feature:literal, $kind:ident [$($scheme:literal),+], $doc:literal;)+) => {
        &[$((stringify!($module), $feature, cfg!(feature = $feature)),)+]
    };
}

/// One built-in backend: its module in the facade, the feature that brings it, and whether
/// this build has it.
#[cfg(test)]
pub(crate) type ModuleRow = (&'static str, &'static str, bool);

#[cfg(test)]
pub(crate) const MODULES: &[ModuleRow] = built_in_backends!(modules_and_features);

#[cfg(test)]
mod tests {
    use super::MODULES;

    /// `.ci/run` finds the backends' features as those of the facade's `Cargo.toml` that bring
    /// a `fencelock-*` crate, and their modules by turning `-` into `_`: both must match the
    /// rows, or CI would check a list that is not the facade's.
    #[test]
    fn the_rows_and_the_manifest_name_the_same_features() {
        let manifest = include_str!("../Cargo.toml");
        let features = manifest
            .split("[features]")
            .nth(1)
            .and_then(|rest| rest.split("\n[").next())
            .unwrap_or_default();
        let mut from_manifest: Vec<&str> = features
            .lines()
            .filter(|line| line.contains("\"dep:fencelock-"))
            .filter_map(|line| line.split('=').next())
            .map(str::trim)
            .collect();
        let mut from_rows: Vec<&str> = MODULES.iter().map(|(_, feature, _)| *feature).collect();
        from_manifest.sort_unstable();
        from_rows.sort_unstable();
        assert_eq!(
            from_manifest, from_rows,
            "features of Cargo.toml vs the rows"
        );
        for (module, feature, _) in MODULES {
            assert_eq!(
                *module,
                feature.replace('-', "_"),
                "module of feature {feature}"
            );
        }
    }
}
