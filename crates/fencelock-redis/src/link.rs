//! `Link`: the connection a backend's commands travel on, one server's or a Redis Cluster's,
//! behind one `ConnectionLike` so the same scripts and commands serve both.
//!
//! On a cluster the driver routes each command by its first key's slot and follows `MOVED`
//! and `ASK`. A script missing from one node's cache (`NOSCRIPT`: a node restarted, a replica
//! just promoted, a slot moved to a node that never ran it) is sent again as `EVAL` with its
//! text, routed by the same key, so it runs on that very node and is cached there. The
//! driver's own fallback, `SCRIPT LOAD` to every master, would fail while any master is
//! down, which is exactly when a failover promotes nodes that lack the scripts.
//! [`ScriptsPerNode`] gives any connection the same fallback (`RedisFence` on a connection of
//! the user's own, a cluster's included).

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Arg, Cmd, ErrorKind, RedisFuture, ServerErrorKind, Value};

use crate::scripts::SCRIPTS;

/// One server's connection, or a cluster's.
#[derive(Clone)]
pub(crate) enum Link {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Node(conn) => conn.req_packed_command(cmd),
            Link::Cluster(conn) => ScriptsPerNode(conn).send(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Link::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Node(conn) => conn.get_db(),
            Link::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Any connection, with this crate's scripts sent whole (`EVAL`) to a node that answers
/// `NOSCRIPT`, routed like the `EVALSHA` was. `RedisFence` wraps the user's connection in it,
/// so a cluster connection of the user's own gets the same per-node fallback.
pub(crate) struct ScriptsPerNode<'c, C>(pub(crate) &'c mut C);

impl<C: ConnectionLike + Send> ScriptsPerNode<'_, C> {
    fn send<'a>(self, cmd: &'a Cmd) -> RedisFuture<'a, Value>
    where
        Self: 'a,
    {
        let conn = self.0;
        Box::pin(async move {
            let reply = conn.req_packed_command(cmd).await;
            if !is_noscript(&reply) {
                return reply;
            }
            match eval_instead(cmd) {
                Some(eval) => conn.req_packed_command(&eval).await,
                None => reply,
            }
        })
    }
}

impl<C: ConnectionLike + Send> ConnectionLike for ScriptsPerNode<'_, C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        ScriptsPerNode(&mut *self.0).send(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

fn is_noscript(reply: &redis::RedisResult<Value>) -> bool {
    match reply {
        Err(e) => e.kind() == ErrorKind::Server(ServerErrorKind::NoScript),
        Ok(Value::ServerError(e)) => e.kind() == Some(ServerErrorKind::NoScript),
        Ok(_) => false,
    }
}

/// `EVALSHA <sha> <numkeys> <keys and args>` of one of this crate's scripts as
/// `EVAL <text> <numkeys> <keys and args>`; `None` for anything else.
fn eval_instead(cmd: &Cmd) -> Option<Cmd> {
    let mut args = cmd.args_iter().map(|arg| match arg {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()??;
    if !name.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let sha = std::str::from_utf8(args.next()??).ok()?;
    let text = SCRIPTS.text(&sha.to_ascii_lowercase())?;
    let mut eval = redis::cmd("EVAL");
    eval.arg(text);
    for arg in args {
        eval.arg(arg?);
    }
    Some(eval)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn evalsha_of_a_known_script_becomes_eval_with_its_text() {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(SCRIPTS.release.get_hash())
            .arg(1)
            .arg("fencelock:{k}:lock")
            .arg("owner:1")
            .arg(b"\x00bytes".as_slice());
        let eval = eval_instead(&evalsha).unwrap();
        let args: Vec<Vec<u8>> = eval
            .args_iter()
            .map(|a| match a {
                Arg::Simple(b) => b.to_vec(),
                _ => panic!("only plain arguments"),
            })
            .collect();
        assert_eq!(args[0], b"EVAL");
        let text = format!(
            "{}\n{}\n{}",
            include_str!("../scripts/token.lua"),
            include_str!("../scripts/queue.lua"),
            include_str!("../scripts/release.lua")
        );
        assert_eq!(args[1], text.as_bytes());
        assert_eq!(
            args[2..],
            [
                b"1".to_vec(),
                b"fencelock:{k}:lock".to_vec(),
                b"owner:1".to_vec(),
                b"\x00bytes".to_vec()
            ]
        );
    }

    #[test]
    fn other_commands_and_unknown_scripts_are_left_alone() {
        assert!(eval_instead(redis::cmd("GET").arg("k")).is_none());
        assert!(eval_instead(redis::cmd("EVALSHA").arg("0".repeat(40)).arg(0)).is_none());
    }
}
