/*!
The threads the proxy recorded last ([`RecentThreads`]), so that a history
a client re-sends each turn is not made into a thread again.

A chat client sends its whole history with every request: the thread the
proxy recorded last for that conversation (the request and its reply),
then the new messages. Building the request's thread means hashing every
message into its node id (and allocating a node for each), work that grows
with the history, when all but the last few nodes exist already in the
thread recorded on the previous turn. So the proxy keeps that thread, found
by its length and the content of its last message, and a request whose
messages begin with it continues it: only the new messages are hashed.

What is kept is only ever reused for equal messages (each one compared),
so it never changes what a request means: the same node ids follow from
equal messages either way. Whether the nodes are still stored is not
assumed either (a node's mark says which store it was written to; the
store checks the mark before it relies on it). What they hold in memory
is bounded: 512 threads, standing for at most 64 MB of requests, the
least recently used out first. A thread a chat completions body made is
kept with that body ([`super::resent`]), so the next request that re-sends
it is found by its bytes, before it is parsed. When the store counts an erasure (a
message redacted, or messages deleted, by any process: `Store::erasures`),
every kept thread is dropped before the next request is read.
*/

use super::resent::ReadFrom;
use skein::core::{Message, NodeId, Thread};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// How many threads are kept: about one per conversation in use.
const CAPACITY: usize = 512;

/// How many bytes of requests the kept threads may stand for: a thread
/// holds its messages (attachments included), about what the request that
/// made it weighed, so this bounds the memory they hold. A request of
/// more than a quarter of it is not kept.
const BUDGET: usize = 64 << 20;

/// How many of a request's last messages may be new (a reply's tool
/// results, a new question) for it to continue a kept thread.
const NEW_MESSAGES: usize = 16;

/// Where a kept thread is found: its length, and a hash of its last
/// message (equality is checked message by message on use).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    len: usize,
    last: u64,
}

impl Key {
    fn of(len: usize, last: &Message) -> Key {
        let mut hasher = std::hash::DefaultHasher::new();
        last.hash(&mut hasher);
        Key {
            len,
            last: hasher.finish(),
        }
    }
}

/// The threads recorded last, by key (threads of the same length may end
/// with the same message: "OK", a deterministic model's equal replies).
#[derive(Debug, Default)]
pub struct RecentThreads(Mutex<Kept>);

#[derive(Debug, Default)]
struct Kept {
    threads: HashMap<Key, Vec<Entry>>,
    count: usize,
    bytes: usize,
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    thread: Thread,
    /// The body it was read from, when a re-sent one can be found by it.
    read: Option<ReadFrom>,
    /// What it holds in memory: the size of the request it was recorded
    /// from, twice when that body is kept too.
    bytes: usize,
    /// When it was last used.
    used: u64,
}

/// A kept thread a request continues.
#[derive(Debug)]
pub struct Continued {
    /// Where it is kept, so that the thread that grows from it replaces it.
    pub place: Place,
    /// The thread: the request's first `thread.len()` messages.
    pub thread: Thread,
}

/// A kept thread whose body a request re-sends with more messages.
#[derive(Debug)]
pub struct Resent {
    pub place: Place,
    /// The thread: the kept body's messages, then the reply.
    pub thread: Thread,
    pub read: ReadFrom,
    /// Where the request's first new message begins.
    pub from: usize,
}

/// Where a kept thread is: its key and its head.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    key: Key,
    head: NodeId,
}

impl RecentThreads {
    /// The longest kept thread whose messages `messages` begin with,
    /// leaving at least one of them new.
    pub fn continued_by(&self, messages: &[Message]) -> Option<Continued> {
        let newest = messages.len().saturating_sub(1);
        for len in (newest.saturating_sub(NEW_MESSAGES - 1).max(1)..=newest).rev() {
            let key = Key::of(len, &messages[len - 1]);
            for thread in self.candidates(key) {
                let equal = thread
                    .ancestors()
                    .zip(messages[..len].iter().rev())
                    .all(|(node, message)| node.message() == message);
                if equal && let Some(head) = thread.head_id() {
                    let place = Place { key, head };
                    self.lock().touch(place);
                    return Some(Continued { place, thread });
                }
            }
        }
        None
    }

    /// The kept thread whose body `body` begins with, up to its last
    /// message, then adds messages to (the longest such body).
    pub fn resent_in(&self, body: &str) -> Option<Resent> {
        let mut found: Option<Resent> = None;
        for (place, thread, read) in self.ending_like(body) {
            if found
                .as_ref()
                .is_some_and(|found| found.read.end >= read.end)
            {
                continue;
            }
            if let Some(from) = read.continued_in(body) {
                found = Some(Resent {
                    place,
                    thread,
                    read,
                    from,
                });
            }
        }
        if let Some(found) = &found {
            self.lock().touch(found.place);
        }
        found
    }

    /// The kept threads whose bodies' last messages end where `body` has
    /// the same bytes and a comma ([`ReadFrom::ends_like`]), taken out of
    /// the lock (shared, not copied) before their whole bodies are
    /// compared.
    fn ending_like(&self, body: &str) -> Vec<(Place, Thread, ReadFrom)> {
        let kept = self.lock();
        kept.threads
            .iter()
            .flat_map(|(key, entries)| entries.iter().map(move |entry| (*key, entry)))
            .filter_map(|(key, entry)| {
                let read = entry.read.as_ref().filter(|read| read.ends_like(body))?;
                let head = entry.thread.head_id()?;
                Some((Place { key, head }, entry.thread.clone(), read.clone()))
            })
            .collect()
    }

    /// Keep `thread` (a recorded request of `bytes` and its reply, with
    /// the body it was read from when a re-sent one can be found by it),
    /// in place of the thread it continues when there was one; the least
    /// recently used go to make room.
    pub fn keep(
        &self,
        thread: Thread,
        bytes: usize,
        replacing: Option<Place>,
        read: Option<ReadFrom>,
    ) {
        let (Some(last), Some(head)) = (thread.head(), thread.head_id()) else {
            return;
        };
        let key = Key::of(thread.len(), last.message());
        let mut kept = self.lock();
        if let Some(replaced) = replacing {
            kept.remove(replaced);
        }
        kept.remove(Place { key, head });
        if bytes > BUDGET / 4 {
            return;
        }
        // The body doubles what is held: a large one is not kept with it.
        let (read, bytes) = match read {
            Some(read) if 2 * bytes <= BUDGET / 4 => (Some(read), 2 * bytes),
            _ => (None, bytes),
        };
        while kept.count >= CAPACITY || kept.bytes + bytes > BUDGET {
            if !kept.remove_oldest() {
                break;
            }
        }
        kept.clock += 1;
        let used = kept.clock;
        kept.threads.entry(key).or_default().push(Entry {
            thread,
            read,
            bytes,
            used,
        });
        kept.count += 1;
        kept.bytes += bytes;
    }

    fn candidates(&self, key: Key) -> Vec<Thread> {
        self.lock()
            .threads
            .get(&key)
            .map_or_else(Vec::new, |threads| {
                threads.iter().map(|entry| entry.thread.clone()).collect()
            })
    }

    /// Forget every kept thread (content they hold may have been erased).
    pub fn clear(&self) {
        *self.lock() = Kept::default();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Kept {
    fn touch(&mut self, place: Place) {
        self.clock += 1;
        let now = self.clock;
        if let Some(entry) = self.threads.get_mut(&place.key).and_then(|threads| {
            threads
                .iter_mut()
                .find(|entry| entry.thread.head_id() == Some(place.head))
        }) {
            entry.used = now;
        }
    }

    fn remove(&mut self, place: Place) {
        let Some(threads) = self.threads.get_mut(&place.key) else {
            return;
        };
        let Some(at) = threads
            .iter()
            .position(|entry| entry.thread.head_id() == Some(place.head))
        else {
            return;
        };
        let removed = threads.swap_remove(at);
        self.count -= 1;
        self.bytes -= removed.bytes;
        if threads.is_empty() {
            self.threads.remove(&place.key);
        }
    }

    /// Remove the least recently used thread; `false` when none is kept.
    fn remove_oldest(&mut self) -> bool {
        let oldest = self
            .threads
            .iter()
            .flat_map(|(key, threads)| threads.iter().map(move |entry| (key, entry)))
            .min_by_key(|(_, entry)| entry.used)
            .and_then(|(key, entry)| {
                Some(Place {
                    key: *key,
                    head: entry.thread.head_id()?,
                })
            });
        match oldest {
            Some(oldest) => {
                self.remove(oldest);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use skein::core::Role;

    /// `len` messages, user and assistant in turn (also the proxy's tests').
    pub(in crate::proxy) fn history(len: usize) -> Vec<Message> {
        (0..len)
            .map(|i| {
                let role = if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                };
                Message::text(role, format!("message {i}"))
            })
            .collect()
    }

    #[test]
    fn a_request_continues_the_kept_thread_its_messages_begin_with() {
        let recent = RecentThreads::default();
        let messages = history(6);
        assert!(recent.continued_by(&messages).is_none(), "nothing kept yet");
        let recorded = Thread::from_messages(messages[..4].iter().cloned());
        recent.keep(recorded.clone(), 1, None, None);
        let continued = recent.continued_by(&messages).expect("continues");
        assert_eq!(continued.thread.head_id(), recorded.head_id());
        // The same ids as the thread built from scratch.
        let whole = continued.thread.extend(messages[4..].iter().cloned());
        assert_eq!(
            whole.head_id(),
            Thread::from_messages(messages.clone()).head_id()
        );
        // The thread that grows from it takes its place.
        recent.keep(whole, 1, Some(continued.place), None);
        assert_eq!(recent.lock().count, 1);
        let longer = history(8);
        assert_eq!(
            recent.continued_by(&longer).unwrap().thread.len(),
            6,
            "the grown thread is found"
        );
    }

    #[test]
    fn a_history_that_differs_anywhere_continues_nothing() {
        let recent = RecentThreads::default();
        let messages = history(6);
        recent.keep(
            Thread::from_messages(messages[..4].iter().cloned()),
            1,
            None,
            None,
        );
        let mut edited = messages.clone();
        edited[1] = Message::text(Role::Assistant, "edited");
        assert!(recent.continued_by(&edited).is_none());
        // A request that is the kept thread with nothing new is built as
        // before (a regenerate sends the request without its reply).
        assert!(recent.continued_by(&messages[..4]).is_none());
        // Too many new messages: not searched that far back.
        assert!(
            recent
                .continued_by(&history(4 + NEW_MESSAGES + 1))
                .is_none()
        );
        assert!(recent.continued_by(&history(4 + NEW_MESSAGES)).is_some());
    }

    #[test]
    fn threads_that_end_alike_are_kept_side_by_side() {
        let recent = RecentThreads::default();
        // Two conversations of the same length whose replies are equal.
        let conversation = |n: usize| {
            let mut messages = vec![Message::text(Role::System, format!("conversation {n}"))];
            messages.extend([
                Message::text(Role::User, "hi"),
                Message::text(Role::Assistant, "OK"),
            ]);
            messages
        };
        for n in 0..2 {
            recent.keep(Thread::from_messages(conversation(n)), 1, None, None);
        }
        assert_eq!(recent.lock().count, 2);
        for n in 0..2 {
            let mut request = conversation(n);
            request.push(Message::text(Role::User, "more"));
            let continued = recent.continued_by(&request).expect("each is found");
            assert_eq!(
                continued.thread.head_id(),
                Thread::from_messages(conversation(n)).head_id()
            );
        }
        // Kept again: not twice.
        recent.keep(Thread::from_messages(conversation(0)), 1, None, None);
        assert_eq!(recent.lock().count, 2);
    }

    #[test]
    fn the_kept_threads_stay_within_their_byte_budget() {
        let recent = RecentThreads::default();
        let thread = |n: usize| Thread::from_messages([Message::text(Role::User, format!("{n}"))]);
        let quarter = BUDGET / 4;
        for n in 0..4 {
            recent.keep(thread(n), quarter, None, None);
        }
        assert_eq!(recent.lock().bytes, BUDGET);
        // One more byte: the least recently used goes.
        recent.keep(thread(4), 1, None, None);
        let kept = recent.lock();
        assert_eq!((kept.count, kept.bytes), (4, 3 * quarter + 1));
        drop(kept);
        // A request too large is not kept at all, and takes nothing out.
        recent.keep(thread(5), quarter + 1, None, None);
        assert_eq!(recent.lock().count, 4);
        // A body counts twice (the thread and its bytes); one too large to
        // keep twice leaves its thread kept without it.
        let recent = RecentThreads::default();
        let body = r#"{"messages":[{"role":"user","content":"a"}]}"#;
        let (open, end) = super::super::resent::bounds(body).unwrap();
        let read = ReadFrom {
            body: body.into(),
            open,
            end,
            messages: 1,
            annotations: Vec::new(),
        };
        recent.keep(thread(6), 10, None, Some(read.clone()));
        recent.keep(thread(7), quarter, None, Some(read));
        let kept = recent.lock();
        assert_eq!(kept.bytes, 20 + quarter);
        let with_body: Vec<bool> = kept
            .threads
            .values()
            .flatten()
            .map(|entry| entry.read.is_some())
            .collect();
        assert_eq!(with_body.iter().filter(|kept| **kept).count(), 1);
    }

    #[test]
    fn the_least_recently_used_thread_goes_first() {
        let recent = RecentThreads::default();
        for n in 0..CAPACITY {
            let first = Message::text(Role::User, format!("conversation {n}"));
            recent.keep(Thread::from_messages([first]), 1, None, None);
        }
        let first = |n: usize| {
            vec![
                Message::text(Role::User, format!("conversation {n}")),
                Message::text(Role::User, "next"),
            ]
        };
        assert!(
            recent.continued_by(&first(0)).is_some(),
            "conversation 0 used again"
        );
        recent.keep(
            Thread::from_messages([Message::text(Role::User, "new")]),
            1,
            None,
            None,
        );
        assert_eq!(recent.lock().count, CAPACITY);
        assert!(recent.continued_by(&first(0)).is_some());
        assert!(recent.continued_by(&first(1)).is_none(), "the oldest went");
    }
}
