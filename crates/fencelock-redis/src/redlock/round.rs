//! Redlock's fan-out: one call to every node at once, answers gathered as they come, a
//! decision as soon as the answers so far allow one, and the rest finished in the background.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, NodeReport, Result};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use super::background::Background;
use super::node::{Link, Node};

/// What one node answered to one call.
#[derive(Debug)]
pub(crate) enum Answer<T> {
    /// The call succeeded.
    Ok(T),
    /// No answer within the limit.
    TimedOut(Duration),
    /// The node could not be reached or answered with an error.
    Failed(Error),
}

type Call<T> = Pin<Box<dyn Future<Output = (usize, Answer<T>)> + Send>>;

/// One call fanned out to every node. Dropping a round abandons the calls still in flight;
/// [`finish_in_background`](Self::finish_in_background) lets them complete instead, counted
/// in the Redlock's [`Background`] so that a program can wait for them before it exits.
pub(crate) struct Round<T> {
    calls: FuturesUnordered<Call<T>>,
    answers: Vec<Option<Answer<T>>>,
}

impl<T: Send + 'static> Round<T> {
    /// Sends `op` to every node, each bounded by `limit` (connecting included).
    pub(crate) fn start<F, Fut>(nodes: &[Arc<Node>], limit: Duration, op: F) -> Self
    where
        F: Fn(Link) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let op = Arc::new(op);
        let calls = nodes
            .iter()
            .enumerate()
            .map(|(index, node)| {
                let node = Arc::clone(node);
                let op = Arc::clone(&op);
                Box::pin(async move {
                    let call = async {
                        let link = node.link().await?;
                        op(link).await
                    };
                    let answer = match tokio::time::timeout(limit, call).await {
                        Ok(Ok(value)) => Answer::Ok(value),
                        Ok(Err(e)) => Answer::Failed(e),
                        Err(_) => Answer::TimedOut(limit),
                    };
                    (index, answer)
                }) as Call<T>
            })
            .collect();
        Round {
            calls,
            answers: nodes.iter().map(|_| None).collect(),
        }
    }

    /// Waits for the next answer and returns it; `None` once every node answered.
    pub(crate) async fn next(&mut self) -> Option<&Answer<T>> {
        let (index, answer) = self.calls.next().await?;
        let slot = self.answers.get_mut(index)?;
        Some(slot.insert(answer))
    }

    /// Moves the calls and answers out, leaving an empty round behind.
    pub(crate) fn take(&mut self) -> Self {
        Round {
            calls: std::mem::take(&mut self.calls),
            answers: std::mem::take(&mut self.answers),
        }
    }

    /// Waits for every answer.
    pub(crate) async fn all(&mut self) {
        while self.next().await.is_some() {}
    }

    /// Calls still without an answer.
    pub(crate) fn pending(&self) -> usize {
        self.calls.len()
    }

    /// The answers so far.
    pub(crate) fn answers(&self) -> impl Iterator<Item = &Answer<T>> {
        self.answers.iter().flatten()
    }

    /// Successful answers for which `f` holds.
    pub(crate) fn count_ok(&self, f: impl Fn(&T) -> bool) -> usize {
        self.answers()
            .filter(|a| matches!(a, Answer::Ok(v) if f(v)))
            .count()
    }

    /// Answers that are errors or time-outs.
    pub(crate) fn count_failed(&self) -> usize {
        self.answers()
            .filter(|a| !matches!(a, Answer::Ok(_)))
            .count()
    }

    /// What each node answered, in words; `describe` words the successful answers.
    pub(crate) fn reports(
        &self,
        nodes: &[Arc<Node>],
        describe: impl Fn(&T) -> String,
    ) -> Vec<NodeReport> {
        nodes
            .iter()
            .zip(&self.answers)
            .map(|(node, answer)| NodeReport {
                node: node.label.clone(),
                outcome: match answer {
                    None => "no answer yet when the outcome was decided".to_owned(),
                    Some(Answer::Ok(value)) => describe(value),
                    Some(Answer::TimedOut(limit)) => format!("timed out after {limit:?}"),
                    Some(Answer::Failed(e)) => format!("error: {e}"),
                },
            })
            .collect()
    }

    /// The first answer that is a configuration error (refused credentials), if any, naming
    /// its node: trying again cannot help, so it is reported as such rather than as a missed
    /// quorum.
    pub(crate) fn config_error(&mut self, nodes: &[Arc<Node>]) -> Option<Error> {
        self.answers
            .iter_mut()
            .zip(nodes)
            .find_map(|(slot, node)| match slot.take() {
                Some(Answer::Failed(Error::InvalidConfig { message, source })) => {
                    let message = if message.contains(&node.label) {
                        message
                    } else {
                        format!("node {}: {message}", node.label)
                    };
                    Some(Error::InvalidConfig { message, source })
                }
                other => {
                    *slot = other;
                    None
                }
            })
    }

    /// Lets the calls still in flight run to their end in a task counted by `background`,
    /// then runs `after`. A round with no call left only runs `after`.
    pub(crate) fn finish_in_background<A>(mut self, background: &Background, after: A)
    where
        A: Future<Output = ()> + Send + 'static,
    {
        background.spawn(async move {
            while self.calls.next().await.is_some() {}
            after.await;
        });
    }
}

/// The number of nodes that makes a quorum of `n`: a strict majority.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!([1, 2, 3, 4, 5, 6, 7].map(quorum), [1, 2, 2, 3, 3, 4, 4]);
    }
}
