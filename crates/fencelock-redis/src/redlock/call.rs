//! One script sent to every node of a Redlock: the same script and arguments, with each node's
//! own key names, the reply decoded by one function. Every per-node step of Redlock (acquire,
//! extend, release, settle, `advance_token`, inspect) is one of these.

use std::sync::Arc;
use std::time::Duration;

use crate::link::Link;
use fencelock_core::{LockKey, Result};
use redis::{FromRedisValue, Script};

use super::node::Node;
use super::round::Round;
use crate::error::{REDLOCK, map_error};
use crate::keys::KeySpace;

/// One of a lock key's Redis keys, named on each node by that node's [`KeySpace`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeyName {
    /// `{prefix}:{<key>}:lock`.
    Lock,
    /// `{prefix}:{<key>}:token`.
    Token,
    /// `{prefix}:{<key>}:released`.
    Channel,
}

impl KeyName {
    fn of(self, keys: &KeySpace, key: &LockKey) -> String {
        match self {
            KeyName::Lock => keys.lock(key),
            KeyName::Token => keys.token(key),
            KeyName::Channel => keys.channel(key),
        }
    }
}

/// One script argument: text, or a key name given as an argument (a channel to publish on).
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Text(String),
    Key(KeyName),
}

impl From<String> for Arg {
    fn from(text: String) -> Self {
        Arg::Text(text)
    }
}

/// How the script travels.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Code {
    /// `EVALSHA`, loading the script on `NOSCRIPT`.
    Cached(&'static Script),
    /// The whole text with `EVAL`, in one command; see `acquire.rs` for why.
    Eval(&'static str),
}

/// A script call, the same on every node but for the key names.
#[derive(Debug, Clone)]
pub(crate) struct NodeCall {
    pub(crate) code: Code,
    pub(crate) key: LockKey,
    pub(crate) keys: &'static [KeyName],
    pub(crate) args: Vec<Arg>,
}

impl NodeCall {
    /// Sends the call to every node, each bounded by `limit` (connecting included), and
    /// decodes each reply with `decode`.
    pub(crate) fn round<R, T, D>(self, nodes: &[Arc<Node>], limit: Duration, decode: D) -> Round<T>
    where
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
        D: Fn(R) -> Result<T> + Send + Sync + 'static,
    {
        let call = Arc::new(self);
        let decode = Arc::new(decode);
        Round::start(nodes, limit, move |link| {
            let call = Arc::clone(&call);
            let decode = Arc::clone(&decode);
            async move {
                let mut conn = link.conn.link.clone();
                let reply: R = call
                    .send(&link.conn.keys, &mut conn)
                    .await
                    .map_err(|e| map_error(REDLOCK, e))?;
                decode(reply)
            }
        })
    }

    async fn send<R: FromRedisValue>(
        &self,
        keys: &KeySpace,
        conn: &mut Link,
    ) -> redis::RedisResult<R> {
        let names = self.keys.iter().map(|k| k.of(keys, &self.key));
        let args = self.args.iter().map(|arg| match arg {
            Arg::Text(text) => text.clone(),
            Arg::Key(name) => name.of(keys, &self.key),
        });
        match self.code {
            Code::Cached(script) => {
                let mut invocation = script.prepare_invoke();
                for name in names {
                    invocation.key(name);
                }
                for arg in args {
                    invocation.arg(arg);
                }
                invocation.invoke_async(conn).await
            }
            Code::Eval(text) => {
                redis::cmd("EVAL")
                    .arg(text)
                    .arg(self.keys.len())
                    .arg(names.collect::<Vec<_>>())
                    .arg(args.collect::<Vec<_>>())
                    .query_async(conn)
                    .await
            }
        }
    }
}
