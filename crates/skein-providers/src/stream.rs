/*!
[`EventStream`]: a `futures_core::Stream` over events computed up front.

The deterministic providers know their whole reply before the first event,
so their stream is a vector drained one item per poll; it never returns
`Pending`. Dropping it drops the remaining events.
*/

use futures_core::Stream;
use skein_core::{ProviderError, StreamEvent};
use std::pin::Pin;
use std::task::{Context, Poll};

/// One item of a provider stream.
pub(crate) type EventResult = Result<StreamEvent, ProviderError>;

/// A stream that yields precomputed events in order.
#[derive(Debug)]
pub(crate) struct EventStream {
    events: std::vec::IntoIter<EventResult>,
}

impl EventStream {
    pub(crate) fn new(events: Vec<EventResult>) -> EventStream {
        EventStream {
            events: events.into_iter(),
        }
    }
}

impl Stream for EventStream {
    type Item = EventResult;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
        Poll::Ready(self.get_mut().events.next())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.events.size_hint()
    }
}
