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
        /// Serialized as whole milliseconds, `waited_ms`.
        #[serde(rename = "waited_ms", alias = "waited", with = "millis")]
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
        /// Serialized as whole milliseconds, `delay_ms`.
        #[serde(rename = "delay_ms", alias = "delay", with = "millis")]
        delay: Duration,
    },
    /// A candidate failed the output contract; a repair follows (or not,
    /// when the attempts are used up).
    Repair {
        attempt: u32,
        errors: Vec<String>,
    },
    /// The request's history held erased messages (`skein redact`) and
    /// the chosen placeholder was sent in their content's place.
    ErasedReplaced {
        nodes: Vec<skein_core::NodeId>,
    },
    Completed {
        usage: Usage,
        attempts: u32,
    },
    Failed {
        error: String,
    },
}

/// Durations in JSON as a plain number of milliseconds, fractional down to
/// the nanosecond (`0.0032` is 3.2 µs), so a stored event reads back equal
/// to the one emitted (exactly, below about 100 days). Events stored
/// before this read back too: they hold serde's `{"secs", "nanos"}`.
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Millis(f64),
        Std { secs: u64, nanos: u32 },
    }

    pub fn serialize<S: Serializer>(duration: &Duration, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_f64(duration.as_nanos() as f64 / 1e6)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Duration, D::Error> {
        Ok(match Stored::deserialize(from)? {
            Stored::Millis(ms) if ms.is_finite() && ms >= 0.0 => {
                Duration::from_nanos((ms * 1e6).round() as u64)
            }
            Stored::Millis(ms) => {
                return Err(serde::de::Error::custom(format!(
                    "{ms} is not a duration in milliseconds"
                )));
            }
            Stored::Std { secs, nanos } => Duration::new(secs, nanos),
        })
    }
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
        self(event);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_plain_milliseconds_and_old_records_still_read() {
        let event = Event {
            run: RunId("r".to_string()),
            seq: 0,
            kind: EventKind::Retry {
                attempt: 1,
                reason: "overloaded".into(),
                delay: Duration::from_millis(1500),
            },
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["delay_ms"].as_f64(), Some(1500.0), "{json}");
        assert!(json.get("delay").is_none(), "{json}");
        assert_eq!(serde_json::from_value::<Event>(json).unwrap(), event);
        // Sub-millisecond waits keep every nanosecond through the text.
        for nanos in [0, 1, 3_217, 999_999, 1_234_567_891, 86_400_000_000_123] {
            let kind = EventKind::Admitted {
                backend: "echo".into(),
                waited: Duration::from_nanos(nanos),
            };
            let text = serde_json::to_string(&kind).unwrap();
            assert_eq!(
                serde_json::from_str::<EventKind>(&text).unwrap(),
                kind,
                "{text}"
            );
        }

        let stored = serde_json::json!({
            "run": "r", "seq": 0, "event": "admitted",
            "backend": "echo", "waited": { "secs": 2, "nanos": 5_000_000 }
        });
        let EventKind::Admitted { waited, .. } =
            serde_json::from_value::<Event>(stored).unwrap().kind
        else {
            panic!("not an admission");
        };
        assert_eq!(waited, Duration::from_millis(2005));
    }
}
