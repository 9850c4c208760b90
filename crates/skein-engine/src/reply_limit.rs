/*!
The reply bound: the most text one model call may produce. A call whose
reply passes it is stopped there and fails with
[`ProviderError::ReplyTooLong`](skein_core::ProviderError::ReplyTooLong),
an ordinary failed call (its run is recorded as failed wherever failed
calls are), and the text channel has had the whole pieces up to the bound.

The bound is set for a piece of work rather than on one engine: a server
runs turns on engines it did not build (a model opened by name, a stored
conversation's own model), and every call made inside [`with_reply_limit`]
is bounded, whichever engine makes it. Outside it replies are bounded
only by the model's token limit.
*/

use std::future::Future;

tokio::task_local! {
    static REPLY_LIMIT: usize;
}

/// Run `work` with every model call made in it bounded to `bytes` of reply
/// text (counted in UTF-8, over the whole call, repairs being calls of
/// their own).
pub async fn with_reply_limit<F: Future>(bytes: usize, work: F) -> F::Output {
    REPLY_LIMIT.scope(bytes, work).await
}

/// The bound of the work running now, if any.
pub(crate) fn current() -> Option<usize> {
    REPLY_LIMIT.try_with(|bytes| *bytes).ok()
}
