/*!
The reply bounds: the most text one model call may produce, and the latest
it may still be producing it. A call whose reply passes its text bound is
stopped there and fails with
[`ProviderError::ReplyTooLong`](skein_core::ProviderError::ReplyTooLong), and
one still running at its deadline is stopped then and fails with
[`ProviderError::ReplyTooSlow`](skein_core::ProviderError::ReplyTooSlow):
ordinary failed calls (their runs are recorded as failed wherever failed
calls are), and the text channel has had the whole pieces up to the stop.

The bounds are set for a piece of work rather than on one engine: a server
runs turns on engines it did not build (a model opened by name, a stored
conversation's own model), and every call made inside [`with_reply_limit`]
(or [`with_reply_deadline`]) is bounded, whichever engine makes it. Outside
them replies are bounded only by the model's token limit and the
provider's own timeouts.
*/

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

tokio::task_local! {
    static REPLY_LIMIT: usize;
    static REPLY_DEADLINE: (Instant, Duration);
}

/// Run `work` with every model call made in it bounded to `bytes` of reply
/// text (counted in UTF-8, over the whole call, repairs being calls of
/// their own).
pub async fn with_reply_limit<F: Future>(bytes: usize, work: F) -> F::Output {
    REPLY_LIMIT.scope(bytes, work).await
}

/// Run `work` with every model call made in it stopped when it is still
/// running `within` from now (one deadline for all of `work`: a call that
/// starts late has what is left).
pub async fn with_reply_deadline<F: Future>(within: Duration, work: F) -> F::Output {
    REPLY_DEADLINE
        .scope((Instant::now() + within, within), work)
        .await
}

/// The text bound of the work running now, if any.
pub(crate) fn current() -> Option<usize> {
    REPLY_LIMIT.try_with(|bytes| *bytes).ok()
}

/// The deadline of the work running now, if any, and the time it was set
/// for (for the error).
pub(crate) fn deadline() -> Option<(Instant, Duration)> {
    REPLY_DEADLINE.try_with(|deadline| *deadline).ok()
}
