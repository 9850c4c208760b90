/*!
Blocking forms of the engine's async operations, like `reqwest::blocking`
(the facade's own types have theirs as `*_blocking` methods, built on the
same runner). These are the engine's calls (PromptKit's layer): **they
record nothing in any store**. A recorded turn is a conversation's
(`Prompt::send_blocking`, `Response::reply`, `Fork::prompt`), which goes
through the turn service; nothing here can be mistaken for one.
Each call runs the async operation to completion on a small runtime of its
own, with identical behaviour. Calling one from inside an async runtime
(where blocking would stall or deadlock it) returns
[`BlockingError::InsideRuntime`] instead of panicking: use the async form
there.
*/

use skein_engine::coordinator::{CallbackError, CoordinateError, Next, Outcome, TurnView};
use skein_engine::{CancellationToken, Engine, EngineError, Exchange, Request, RunOutput};
use std::future::Future;

/// A blocking call's failure: the operation's own error, or a call made
/// where blocking is not allowed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlockingError<E> {
    #[error(
        "a blocking skein call was made inside an async runtime, where it would block the runtime; \
         use the async form (`.await`) there"
    )]
    InsideRuntime,
    #[error("cannot start a runtime for a blocking call: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Operation(E),
}

impl<E> BlockingError<E> {
    /// The operation's own error, if that is what this is.
    pub fn operation(&self) -> Option<&E> {
        match self {
            BlockingError::Operation(error) => Some(error),
            _ => None,
        }
    }
}

/// Run a facade operation to completion on a fresh current-thread runtime:
/// the blocking form of every `send`, `load`, `log` and `create`.
pub(crate) fn wait<T>(future: impl Future<Output = crate::Result<T>>) -> crate::Result<T> {
    block_on(future).map_err(|error| match error {
        BlockingError::InsideRuntime => crate::Error::InsideRuntime,
        BlockingError::Runtime(error) => crate::Error::Runtime(error),
        BlockingError::Operation(error) => error,
    })
}

/// Run `future` to completion on a fresh current-thread runtime.
fn block_on<T, E>(future: impl Future<Output = Result<T, E>>) -> Result<T, BlockingError<E>> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(BlockingError::InsideRuntime);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BlockingError::Runtime)?;
    skein_store::blocking_caller(|| runtime.block_on(future)).map_err(BlockingError::Operation)
}

/// [`Engine::run`], blocking: one model call, recorded nowhere.
pub fn run(engine: &Engine, request: Request) -> Result<RunOutput, BlockingError<EngineError>> {
    block_on(engine.run(request))
}

/// [`Engine::continue_from`], blocking: recorded nowhere.
pub fn continue_from(
    engine: &Engine,
    exchange: &Exchange,
    request: Request,
) -> Result<RunOutput, BlockingError<EngineError>> {
    block_on(engine.continue_from(exchange, request))
}

/// [`Engine::coordinate`], blocking: recorded nowhere. The callback is the same as the async
/// form's: it returns a future, which this call drives.
pub fn coordinate<F>(
    engine: &Engine,
    cancel: &CancellationToken,
    start: &Exchange,
    additional_turns: u32,
    next: F,
) -> Result<Outcome, BlockingError<CoordinateError>>
where
    F: for<'a> FnMut(
            TurnView<'a>,
            &'a CancellationToken,
        ) -> skein_core::BoxFuture<'a, Result<Next, CallbackError>>
        + Send,
{
    block_on(engine.coordinate(cancel, start, additional_turns, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_core::{Message, Role};
    use skein_engine::{BackendDef, BackendKind, Catalog, MessageTemplate, Profile, PromptDef};

    fn engine() -> Engine {
        Engine::new(
            Catalog::new()
                .backend(BackendDef::new("echo", BackendKind::Echo).capacity(1))
                .profile(Profile::new("quick", "echo", "echo"))
                .prompt(
                    PromptDef::new("ask", vec![MessageTemplate::new(Role::User, "{{ q }}")])
                        .variable("q")
                        .default_profile("quick"),
                ),
        )
        .unwrap()
    }

    #[test]
    fn blocking_forms_behave_like_the_async_ones() {
        let engine = engine();
        let first = run(&engine, Request::prompt("ask").var("q", "hello").capture()).unwrap();
        let exchange = first.exchange.unwrap();
        let next = continue_from(
            &engine,
            &exchange,
            Request::messages([Message::user("again")]).profile("quick"),
        )
        .unwrap();
        assert_eq!(next.prepared.thread.len(), 3);
        let mut turns = 0;
        let outcome = coordinate(
            &engine,
            &CancellationToken::new(),
            &exchange,
            2,
            |view, _| {
                turns += 1;
                let continue_ = view.turns_remaining() > 0;
                Box::pin(async move {
                    Ok(if continue_ {
                        Next::Continue(Request::messages([Message::user("more")]).profile("quick"))
                    } else {
                        Next::Stop
                    })
                })
            },
        )
        .unwrap();
        assert_eq!(outcome, Outcome::Stopped);
        assert_eq!(
            turns, 3,
            "the start, then each of the two permitted responses"
        );
    }

    #[test]
    fn a_blocking_call_inside_a_runtime_is_an_error_not_a_panic() {
        let engine = engine();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let error = runtime
            .block_on(async { run(&engine, Request::prompt("ask").var("q", "x")) })
            .unwrap_err();
        assert!(matches!(error, BlockingError::InsideRuntime), "{error}");
        assert!(error.to_string().contains("use the async form"));
    }
}
