//! The nodes of one Redlock and what every operation on them shares: the quorum, the time
//! limit per node, and how a missed quorum is reported.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, Result};

use super::background::Background;
use super::call::NodeCall;
use super::gate::Gates;
use super::node::Node;
use super::round::{Round, quorum};

/// The nodes of one Redlock.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) nodes: Vec<Arc<Node>>,
    /// How many nodes make a quorum.
    pub(crate) needed: usize,
    pub(crate) node_timeout: Duration,
    pub(crate) prefix: String,
    /// The node calls left running after their operation was decided.
    pub(crate) background: Background,
    /// Which request of this process watches the nodes for a key's release.
    pub(crate) gates: Gates,
}

impl Cluster {
    pub(crate) fn new(nodes: Vec<Arc<Node>>, node_timeout: Duration, prefix: String) -> Self {
        Cluster {
            needed: quorum(nodes.len()),
            nodes,
            node_timeout,
            prefix,
            background: Background::new(),
            gates: Gates::default(),
        }
    }

    /// `call` sent to every node, each bounded by `limit`.
    pub(crate) fn round<R, T, D>(&self, limit: Duration, call: NodeCall, decode: D) -> Round<T>
    where
        R: redis::FromRedisValue + Send + 'static,
        T: Send + 'static,
        D: Fn(R) -> Result<T> + Send + Sync + 'static,
    {
        call.round(&self.nodes, limit, decode)
    }

    /// The error for a round that did not reach a quorum: a node's configuration error if
    /// there is one (trying again cannot help), else [`Error::QuorumFailed`] with what each
    /// node answered, `describe` wording the successful answers.
    pub(crate) fn quorum_failed<T>(
        &self,
        round: &mut Round<T>,
        granted: usize,
        describe: impl Fn(&T) -> String,
    ) -> Error
    where
        T: Send + 'static,
    {
        if let Some(e) = round.config_error(&self.nodes) {
            return e;
        }
        Error::QuorumFailed {
            granted,
            needed: self.needed,
            nodes: round.reports(&self.nodes, describe),
        }
    }

    /// `Some(true)` when every node persists every write, `Some(false)` when one does not.
    ///
    /// Every node, not only a quorum: two quorums may share a single node, and if that node
    /// restarted empty, a token written back to the first quorum is not seen by the second.
    pub(crate) fn server_persists(&self) -> Option<bool> {
        let views: Vec<Option<bool>> = self.nodes.iter().map(|n| n.persists()).collect();
        if views.contains(&Some(false)) {
            Some(false)
        } else if views.iter().all(|p| *p == Some(true)) {
            Some(true)
        } else {
            None
        }
    }
}
