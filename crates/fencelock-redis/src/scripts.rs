//! The Lua scripts, loaded from `scripts/*.lua`. `Script::invoke_async` sends EVALSHA and
//! falls back to loading the script on `NOSCRIPT` (after a restart or `SCRIPT FLUSH`).
//!
//! The scripts that grant, release and leave the queue are `token.lua` and `queue.lua`
//! followed by their own text, so taking a token and the queue's upkeep are written once. The
//! fenced scripts (`storage_apply.lua`, `fence_apply.lua`) are `admit.lua` followed by their
//! own text, so the fence rule of DESIGN section 2 is written once in Lua; the shared-lock
//! scripts are `token.lua` and `read_phase.lua` followed by theirs, so the read phase's upkeep
//! (the server's clock, forgetting expired readers, the phase's expiry) is written once too.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::Script;

/// Every script, hashed once per process.
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) acquire_all: Script,
    pub(crate) extend: Script,
    pub(crate) release: Script,
    pub(crate) pass: Script,
    pub(crate) leave: Script,
    pub(crate) inspect: Script,
    pub(crate) inspect_queue: Script,
    pub(crate) acquire_shared: Script,
    pub(crate) extend_shared: Script,
    pub(crate) release_shared: Script,
    pub(crate) inspect_shared: Script,
    pub(crate) advance_token: Script,
    pub(crate) storage_apply: Script,
    pub(crate) fence_apply: Script,
    pub(crate) fence_peek: Script,
    pub(crate) redlock_extend: Script,
    pub(crate) redlock_release: Script,
    pub(crate) redlock_settle: Script,
    /// Every script's text by its SHA-1, for sending a script as `EVAL` to a node that does
    /// not have it cached.
    texts: HashMap<String, String>,
}

impl Scripts {
    /// The text of the script whose SHA-1 (lower-case hex) is `sha`.
    pub(crate) fn text(&self, sha: &str) -> Option<&str> {
        self.texts.get(sha).map(String::as_str)
    }
}

/// The acquire script's text, for callers that send it whole with `EVAL`.
pub(crate) static ACQUIRE: LazyLock<String> =
    LazyLock::new(|| queued(include_str!("../scripts/acquire.lua")));

/// Taking a key's next token, prepended to every script that grants one.
const TOKEN: &str = include_str!("../scripts/token.lua");

/// The waiters' queue helpers, prepended to the scripts that grant, release or leave.
const QUEUE: &str = include_str!("../scripts/queue.lua");

fn queued(body: &str) -> String {
    format!("{TOKEN}\n{QUEUE}\n{body}")
}

/// `admit()`, the fence rule, prepended to every fenced script.
const ADMIT: &str = include_str!("../scripts/admit.lua");

fn fenced(body: &str) -> String {
    format!("{ADMIT}\n{body}")
}

/// The read phase's helpers, prepended to every shared-lock script.
const READ_PHASE: &str = include_str!("../scripts/read_phase.lua");

fn shared(body: &str) -> String {
    format!("{TOKEN}\n{READ_PHASE}\n{body}")
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let mut texts = HashMap::new();
    let mut script = |text: String| {
        let script = Script::new(&text);
        texts.insert(script.get_hash().to_owned(), text);
        script
    };
    Scripts {
        acquire: script(ACQUIRE.clone()),
        acquire_all: script(queued(include_str!("../scripts/acquire_all.lua"))),
        extend: script(include_str!("../scripts/extend.lua").to_owned()),
        release: script(queued(include_str!("../scripts/release.lua"))),
        pass: script(queued(include_str!("../scripts/pass.lua"))),
        leave: script(queued(include_str!("../scripts/leave.lua"))),
        inspect: script(include_str!("../scripts/inspect.lua").to_owned()),
        inspect_queue: script(include_str!("../scripts/inspect_queue.lua").to_owned()),
        acquire_shared: script(shared(include_str!("../scripts/acquire_shared.lua"))),
        extend_shared: script(shared(include_str!("../scripts/extend_shared.lua"))),
        release_shared: script(shared(include_str!("../scripts/release_shared.lua"))),
        inspect_shared: script(shared(include_str!("../scripts/inspect_shared.lua"))),
        advance_token: script(include_str!("../scripts/advance_token.lua").to_owned()),
        storage_apply: script(fenced(include_str!("../scripts/storage_apply.lua"))),
        fence_apply: script(fenced(include_str!("../scripts/fence_apply.lua"))),
        fence_peek: script(include_str!("../scripts/fence_peek.lua").to_owned()),
        redlock_extend: script(include_str!("../scripts/redlock_extend.lua").to_owned()),
        redlock_release: script(include_str!("../scripts/redlock_release.lua").to_owned()),
        redlock_settle: script(include_str!("../scripts/redlock_settle.lua").to_owned()),
        texts,
    }
});
