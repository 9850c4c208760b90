/*!
Sending several statements in one round trip. tokio-postgres writes a
request to the connection the first time its future is polled, and the
server answers requests in the order it received them; so polling each
queued future once, in order, sends them back to back, and awaiting them
afterwards collects the answers. A write that would take one round trip per
statement (blobs, nodes, each run, its tools, the bookmark) takes one.

Statements must be prepared before they are queued (a cache miss would
prepare on first poll and send the execution late, out of order). Nothing
is sent until [`Pipeline::run`]: a statement that fails aborts the
transaction, and a statement prepared after it was sent would then fail
with "current transaction is aborted" in its place, hiding the error that
says what happened (a lane taken by a concurrent writer, which is retried).
*/

use crate::error::Result;
use deadpool_postgres::GenericClient;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use tokio_postgres::Statement;
use tokio_postgres::types::ToSql;

type Pending<'c> = Pin<Box<dyn Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'c>>;

/// A parameter the pipeline owns until its statement has run.
pub(crate) type Param = Box<dyn ToSql + Sync + Send>;

/// Statements queued for one round trip, executed in queue order.
pub(crate) struct Pipeline<'c> {
    pending: Vec<Pending<'c>>,
}

impl<'c> Pipeline<'c> {
    pub(crate) fn new() -> Pipeline<'c> {
        Pipeline {
            pending: Vec::new(),
        }
    }

    /// Queue `statement` with `params`, to be sent by [`Pipeline::run`].
    /// Returns its position in the results of `run`.
    pub(crate) fn push<C: GenericClient>(
        &mut self,
        client: &'c C,
        statement: Statement,
        params: Vec<Param>,
    ) -> usize {
        self.pending.push(Box::pin(async move {
            let refs: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|param| param.as_ref() as &(dyn ToSql + Sync))
                .collect();
            client.execute(&statement, &refs).await
        }));
        self.pending.len() - 1
    }

    /// Send every queued statement, back to back, and wait for them; the
    /// rows each changed, in order. The first failure is returned (later
    /// statements then fail too: the transaction is aborted).
    pub(crate) async fn run(mut self) -> Result<Vec<u64>> {
        // The first poll writes each request; the answers are awaited below.
        for pending in &mut self.pending {
            if let Poll::Ready(done) = pending
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
            {
                *pending = Box::pin(std::future::ready(done));
            }
        }
        let mut changed = Vec::with_capacity(self.pending.len());
        let mut failure = None;
        for pending in self.pending {
            match pending.await {
                Ok(rows) => changed.push(rows),
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        match failure {
            Some(error) => Err(error.into()),
            None => Ok(changed),
        }
    }
}
