/*!
One turn: append the caller's messages to a history, make one model call,
append the assistant's reply, and describe the call as a run record.

A turn is computed entirely in memory (node ids exist before anything is
written); recording it is a separate, explicit step ([`record`]) that commits
its nodes, its run and the bookmark move in one transaction. A failed call
yields an error carrying the failed run record and no node.
*/

use skein_core::provider::GenerationOptions;
use skein_core::{
    Message, ModelRequest, ModelResponse, NodeId, Provider, ProviderError, ResponseAssembler,
    StreamEvent, Thread, ToolSpec,
};
use skein_store::records::now_ms;
use skein_store::{
    AppendReport, ConversationId, RunRecord, RunStatus, Store, StoreError, TurnCommit,
};

/// A model call waiting to run.
#[derive(Clone, Debug)]
pub struct Turn {
    /// Everything before this turn.
    pub history: Thread,
    /// What the caller adds (a user message, perhaps a system message first).
    pub messages: Vec<Message>,
    /// The model name, as the provider knows it.
    pub model: String,
    pub options: GenerationOptions,
    pub tools: Vec<ToolSpec>,
}

/// A completed turn.
#[derive(Clone, Debug)]
pub struct TurnOutcome {
    /// The history, the caller's messages and the reply.
    pub thread: Thread,
    pub response: ModelResponse,
    pub run: RunRecord,
}

impl TurnOutcome {
    /// The assistant node.
    pub fn head(&self) -> NodeId {
        self.thread.head_id().expect("a turn ends with the reply")
    }
}

/// Why a turn did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// The model call failed. The run record says so; no node was produced.
    #[error("{source}")]
    Provider {
        run: Box<RunRecord>,
        #[source]
        source: ProviderError,
    },
    #[error("a turn needs at least one new message")]
    NothingToSend,
}

impl Turn {
    /// A turn that sends `messages` after `history` to `model`.
    pub fn new(history: Thread, messages: Vec<Message>, model: impl Into<String>) -> Turn {
        Turn {
            history,
            messages,
            model: model.into(),
            options: GenerationOptions::default(),
            tools: Vec::new(),
        }
    }

    /// Run the model call, passing each piece of reply text to `on_text` as
    /// it streams in.
    pub async fn run(
        self,
        provider: &dyn Provider,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<TurnOutcome, TurnError> {
        if self.messages.is_empty() {
            return Err(TurnError::NothingToSend);
        }
        let request_thread = self.history.extend(self.messages);
        let mut run = RunRecord::new(self.model.clone(), provider.name());
        run.input_head = request_thread.head_id();
        run.tools = self.tools.clone();
        run.options = self.options.clone();
        let mut request = ModelRequest::new(self.model, request_thread.clone());
        request.tools = self.tools;
        request.options = self.options;

        let mut stream = provider.stream(request);
        let mut assembler = ResponseAssembler::new();
        let result = loop {
            match std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
                None => break assembler.finish(),
                Some(Err(error)) => break Err(error),
                Some(Ok(event)) => {
                    if let StreamEvent::Text(text) = &event {
                        on_text(text);
                    }
                    if let Err(error) = assembler.push(event) {
                        break Err(error);
                    }
                }
            }
        };
        run.finished_ms = Some(now_ms());
        match result {
            Ok(response) => {
                let thread = request_thread.push(response.message.clone());
                run.output_head = thread.head_id();
                run.usage = response.usage;
                run.usage_complete =
                    response.usage.input_tokens.is_some() && response.usage.output_tokens.is_some();
                Ok(TurnOutcome {
                    thread,
                    response,
                    run,
                })
            }
            Err(source) => {
                run.status = if source == ProviderError::Cancelled {
                    RunStatus::Cancelled
                } else {
                    RunStatus::Failed
                };
                run.error = Some(source.to_string());
                run.usage_complete = false;
                Err(TurnError::Provider {
                    run: Box::new(run),
                    source,
                })
            }
        }
    }
}

/// Record a completed turn on a conversation: its nodes, its run and the
/// move of the bookmark from `expected_head`, in one transaction. When the
/// bookmark moved meanwhile the turn is still stored and the error says where.
pub fn record(
    store: &Store,
    conversation: &ConversationId,
    expected_head: Option<NodeId>,
    outcome: &mut TurnOutcome,
) -> Result<AppendReport, StoreError> {
    outcome.run.conversation = Some(conversation.clone());
    store.commit_turn(&TurnCommit {
        conversation,
        expected_head,
        thread: &outcome.thread,
        runs: std::slice::from_ref(&outcome.run),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_providers::Echo;

    #[tokio::test]
    async fn a_turn_streams_its_text_and_describes_its_run() {
        let history = Thread::new().push(Message::system("be brief"));
        let turn = Turn::new(history.clone(), vec![Message::user("hello there")], "echo");
        let mut streamed = String::new();
        let outcome = turn
            .run(&Echo, &mut |text| streamed.push_str(text))
            .await
            .unwrap();
        assert_eq!(streamed, outcome.response.message.joined_text());
        assert_eq!(outcome.thread.len(), 3);
        assert_eq!(outcome.thread.parent().parent(), history);
        assert_eq!(outcome.run.output_head, outcome.thread.head_id());
        assert_eq!(outcome.run.input_head, outcome.thread.parent().head_id());
        assert_eq!(outcome.run.status, RunStatus::Succeeded);
        assert!(outcome.run.usage.input_tokens.is_some());
    }

    #[tokio::test]
    async fn an_empty_turn_is_refused() {
        let turn = Turn::new(Thread::new(), vec![], "echo");
        assert!(matches!(
            turn.run(&Echo, &mut |_| {}).await,
            Err(TurnError::NothingToSend)
        ));
    }

    #[tokio::test]
    async fn a_failed_call_yields_a_failed_run_and_no_node() {
        let script = skein_providers::Scripted::from_toml_str(
            "[[rules]]\nerror = { kind = \"server\", message = \"overloaded\" }\n",
        )
        .unwrap();
        let turn = Turn::new(Thread::new(), vec![Message::user("hi")], "scripted");
        match turn.run(&script, &mut |_| {}).await {
            Err(TurnError::Provider { run, source }) => {
                assert_eq!(run.status, RunStatus::Failed);
                assert_eq!(run.output_head, None);
                assert!(source.to_string().contains("overloaded"));
            }
            other => panic!("expected a provider failure, got {other:?}"),
        }
    }
}
