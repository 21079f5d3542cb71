//! The Lua scripts, loaded from `scripts/*.lua`. `Script::invoke_async` sends EVALSHA and
//! falls back to loading the script on `NOSCRIPT` (after a restart or `SCRIPT FLUSH`).
//!
//! The fenced scripts (`storage_apply.lua`, `fence_apply.lua`) are `admit.lua` followed by
//! their own text, so the fence rule of DESIGN section 2 is written once in Lua.

use std::sync::LazyLock;

use redis::Script;

/// Every script, hashed once per process.
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) extend: Script,
    pub(crate) release: Script,
    pub(crate) inspect: Script,
    pub(crate) advance_token: Script,
    pub(crate) storage_apply: Script,
    pub(crate) fence_apply: Script,
    pub(crate) fence_peek: Script,
    pub(crate) redlock_extend: Script,
    pub(crate) redlock_release: Script,
    pub(crate) redlock_settle: Script,
}

/// The acquire script's text, for callers that send it whole with `EVAL`.
pub(crate) const ACQUIRE: &str = include_str!("../scripts/acquire.lua");

/// `admit()`, the fence rule, prepended to every fenced script.
const ADMIT: &str = include_str!("../scripts/admit.lua");

fn fenced(body: &str) -> Script {
    Script::new(&format!("{ADMIT}\n{body}"))
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new(ACQUIRE),
    extend: Script::new(include_str!("../scripts/extend.lua")),
    release: Script::new(include_str!("../scripts/release.lua")),
    inspect: Script::new(include_str!("../scripts/inspect.lua")),
    advance_token: Script::new(include_str!("../scripts/advance_token.lua")),
    storage_apply: fenced(include_str!("../scripts/storage_apply.lua")),
    fence_apply: fenced(include_str!("../scripts/fence_apply.lua")),
    fence_peek: Script::new(include_str!("../scripts/fence_peek.lua")),
    redlock_extend: Script::new(include_str!("../scripts/redlock_extend.lua")),
    redlock_release: Script::new(include_str!("../scripts/redlock_release.lua")),
    redlock_settle: Script::new(include_str!("../scripts/redlock_settle.lua")),
});
