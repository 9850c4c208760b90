/*!
Blocking forms of the recorded chat's async operations, for code without an
async runtime: each runs the async operation to completion on a small
runtime of its own, with identical behaviour. Called from inside an async
runtime (where blocking would stall it), they return
[`RecordedError::InsideRuntime`] instead of panicking.
*/

use crate::chat::{RecordedChat, RecordedChatBuilder};
use crate::error::{RecordedError, Result};
use crate::evidence::Turn;
use crate::persist::{LoadedTurn, TurnAt};
use crate::reason::{ReasonOptions, Report};
use crate::rerun::{RerunOptions, RerunResult};
use skein_store::{ConversationId, RerunId};
use std::future::Future;
use std::sync::Arc;

fn block_on<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(RecordedError::InsideRuntime);
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RecordedError::Runtime)?
        .block_on(future)
}

impl RecordedChatBuilder {
    /// [`RecordedChatBuilder::build`], blocking.
    pub fn build_blocking(self) -> Result<RecordedChat> {
        block_on(self.build())
    }

    /// [`RecordedChatBuilder::load`], blocking.
    pub fn load_blocking(self, conversation: &ConversationId) -> Result<RecordedChat> {
        block_on(self.load(conversation))
    }

    /// [`RecordedChatBuilder::resume`], blocking.
    pub fn resume_blocking(self, conversation: &ConversationId) -> Result<RecordedChat> {
        block_on(self.resume(conversation))
    }

    /// [`RecordedChatBuilder::load_turn`], blocking.
    pub fn load_turn_blocking(self, at: TurnAt) -> Result<LoadedTurn> {
        block_on(self.load_turn(at))
    }
}

impl LoadedTurn {
    /// [`LoadedTurn::reason`], blocking.
    pub fn reason_blocking(&mut self, options: ReasonOptions) -> Result<Arc<Report>> {
        block_on(self.reason(options))
    }

    /// [`LoadedTurn::rerun`], blocking.
    pub fn rerun_blocking(&mut self, options: RerunOptions) -> Result<RerunResult> {
        block_on(self.rerun(options))
    }

    /// [`LoadedTurn::fork`], blocking.
    pub fn fork_blocking(&self, from_rerun: Option<&RerunResult>) -> Result<RecordedChat> {
        block_on(self.fork(from_rerun))
    }

    /// [`LoadedTurn::fork_from_rerun`], blocking.
    pub fn fork_from_rerun_blocking(&self, rerun: &RerunId) -> Result<RecordedChat> {
        block_on(self.fork_from_rerun(rerun))
    }
}

impl RecordedChat {
    /// [`RecordedChat::send`], blocking.
    pub fn send_blocking(&mut self, text: impl Into<String>) -> Result<Arc<Turn>> {
        block_on(async { self.send(text).await.cloned() })
    }

    /// [`RecordedChat::reason`], blocking.
    pub fn reason_blocking(&mut self, k: usize, options: ReasonOptions) -> Result<Arc<Report>> {
        block_on(self.reason(k, options))
    }

    /// [`RecordedChat::rerun_turn`], blocking.
    pub fn rerun_turn_blocking(&mut self, k: usize, options: RerunOptions) -> Result<RerunResult> {
        block_on(self.rerun_turn(k, options))
    }

    /// [`RecordedChat::fork`], blocking.
    pub fn fork_blocking(
        &self,
        k: usize,
        from_rerun: Option<&RerunResult>,
    ) -> Result<RecordedChat> {
        block_on(self.fork(k, from_rerun))
    }

    /// [`RecordedChat::fork_from_rerun`], blocking.
    pub fn fork_from_rerun_blocking(&self, rerun: &RerunId) -> Result<RecordedChat> {
        block_on(self.fork_from_rerun(rerun))
    }
}
