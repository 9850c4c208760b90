/*!
Observation: every run has an id and an ordered stream of metadata-only
events (admitted, attempt started, retry, repair, completed, failed).
Observers compose: an engine-wide list plus any added per request, each
seeing every event of the runs it watches exactly once, in order.

Two ways to watch, because no application code may run while a run holds
its admission permit (DESIGN.md invariant 9):

- an [`Observer`] callback is called with the run's events once the run
  has released its permit (at its end), in order;
- an [`EventChannel`] receives each event live, as it happens: sending on a
  channel runs no application code.

Events never carry message content; content is reached explicitly through a
run's output and its exchange.
*/

use serde::{Deserialize, Serialize};
pub use skein_core::RunId;
use skein_core::Usage;
use std::sync::Arc;
use std::time::Duration;

/// Why an attempt (one model call within a run) was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptKind {
    /// The run's first call.
    Initial,
    /// A structural repair after the previous candidate failed the contract.
    Repair,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// The run got its admission permit for a backend.
    Admitted {
        backend: String,
        waited: Duration,
    },
    AttemptStarted {
        attempt: u32,
        kind: AttemptKind,
    },
    /// The transport retried a call.
    Retry {
        attempt: u32,
        reason: String,
        delay: Duration,
    },
    /// A candidate failed the output contract; a repair follows (or not,
    /// when the attempts are used up).
    Repair {
        attempt: u32,
        errors: Vec<String>,
    },
    Completed {
        usage: Usage,
        attempts: u32,
    },
    Failed {
        error: String,
    },
}

/// One event of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub run: RunId,
    /// Position in the run's stream, from 0.
    pub seq: u32,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Something that wants a run's events.
pub trait Observer: Send + Sync {
    fn observe(&self, event: &Event);
}

impl<F: Fn(&Event) + Send + Sync> Observer for F {
    fn observe(&self, event: &Event) {
        self(event)
    }
}

/// A live feed of events: the sending half of an unbounded channel.
pub type EventChannel = tokio::sync::mpsc::UnboundedSender<Event>;

/// Who watches a run.
#[derive(Clone, Default)]
pub struct Watchers {
    pub(crate) observers: Vec<Arc<dyn Observer>>,
    pub(crate) channels: Vec<EventChannel>,
}

impl Watchers {
    pub(crate) fn extend(&mut self, other: &Watchers) {
        self.observers.extend(other.observers.iter().cloned());
        self.channels.extend(other.channels.iter().cloned());
    }
}

/// Records one run's events, sends them live to channels, and delivers them
/// to callbacks when asked (only ever with no permit held).
pub(crate) struct Emitter {
    run: RunId,
    watchers: Watchers,
    events: Vec<Event>,
    delivered: usize,
}

impl Emitter {
    pub(crate) fn new(run: RunId, watchers: Watchers) -> Emitter {
        Emitter {
            run,
            watchers,
            events: Vec::new(),
            delivered: 0,
        }
    }

    pub(crate) fn emit(&mut self, kind: EventKind) {
        let event = Event {
            run: self.run.clone(),
            seq: self.events.len() as u32,
            kind,
        };
        for channel in &self.watchers.channels {
            let _ = channel.send(event.clone());
        }
        self.events.push(event);
    }

    /// Call the observers with every event not yet delivered. Callers hold
    /// no admission permit.
    pub(crate) fn deliver(&mut self) {
        for event in &self.events[self.delivered..] {
            for observer in &self.watchers.observers {
                observer.observe(event);
            }
        }
        self.delivered = self.events.len();
    }

    pub(crate) fn events(&self) -> &[Event] {
        &self.events
    }
}
