/*!
The proxy's clients, kept apart ([`ClientKeys`]). Without client keys the
proxy has one population of clients: any request may continue any
conversation the proxy recorded (by its history, a response id, a message
thread or a session name). With them, each key is a client, named by the
keys file:

- the server needs a token, the operator's, which clients are not given:
  the web view shows and acts on every conversation; a client's key opens
  the proxy's routes and nothing else (`crate::access`);
- a request must carry a known key (`x-api-key`, or `Authorization:
  Bearer`; the proxy's routes do not take the token), else it is a 401,
  on every proxy route;
- its runs are recorded with the key's client name (the `x-skein-client`
  header and the request's `user` fields no longer say who asks);
- the conversations it starts are that client's (their settings name it),
  and it reaches only those: another client's response ids and message
  threads are answered as unknown ones are, a history another client
  recorded starts a conversation of this client's own (sharing the stored
  messages, as two sessions do), and the answers from the recording are
  only this client's;
- the names it gives (`x-skein-conversation-name`, its sessions) are its
  own: a conversation is stored under `CLIENT/NAME`, so two clients'
  sessions of one name are two conversations.

The keys are held in memory only: never stored, logged or shown (the
`Debug` form lists the client names).
*/

use skein::providers::Secret;
use std::collections::BTreeSet;
use std::fmt;

/// The shortest client key accepted (the server token's minimum).
pub const KEY_MIN: usize = 16;

/// The longest client name, in bytes.
pub const NAME_MAX: usize = 64;

/// The clients a proxy serves, by key.
#[derive(Clone)]
pub struct ClientKeys {
    clients: Vec<(Secret, String)>,
}

impl ClientKeys {
    /// Read a keys file's text: one client a line, its name then its key,
    /// separated by white space (`alice 3f9c…`); blank lines and lines
    /// starting with `#` are skipped. A name is 1 to 64 ASCII letters,
    /// digits, `.`, `_` or `-`; a key is at least 16 visible characters;
    /// names and keys are each unique. An error names the line, never the
    /// key.
    pub fn parse(text: &str) -> Result<ClientKeys, String> {
        let mut clients: Vec<(Secret, String)> = Vec::new();
        let mut names = BTreeSet::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = index + 1;
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, key] = fields[..] else {
                return Err(format!(
                    "line {at}: a line is a client's name and its key, separated by a space"
                ));
            };
            check_name(name).map_err(|why| format!("line {at}: {why}"))?;
            if key.chars().count() < KEY_MIN {
                return Err(format!(
                    "line {at}: client `{name}`'s key is shorter than {KEY_MIN} characters \
                     (make one with `openssl rand -hex 16`)"
                ));
            }
            if !names.insert(name.to_string()) {
                return Err(format!("line {at}: client `{name}` is named twice"));
            }
            if clients.iter().any(|(known, _)| same(known.expose(), key)) {
                return Err(format!(
                    "line {at}: client `{name}`'s key is another client's too: each client needs \
                     a key of its own"
                ));
            }
            clients.push((Secret::new(key), name.to_string()));
        }
        if clients.is_empty() {
            return Err("it names no client (a line is a client's name and its key)".into());
        }
        Ok(ClientKeys { clients })
    }

    /// The client whose key `key` is. Every key is compared, in time that
    /// does not depend on where a key differs.
    pub fn client(&self, key: &str) -> Option<&str> {
        let mut found = None;
        for (known, name) in &self.clients {
            if same(known.expose(), key) {
                found = Some(name.as_str());
            }
        }
        found
    }

    /// The clients' names, in the file's order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.clients.iter().map(|(_, name)| name.as_str())
    }

    /// `name` as a client's own: a conversation name or session it gives
    /// is stored under `CLIENT/NAME`.
    pub fn scoped(client: &str, name: &str) -> String {
        format!("{client}/{name}")
    }
}

impl fmt::Debug for ClientKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClientKeys")
            .field(&self.names().collect::<Vec<_>>())
            .finish()
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.len() > NAME_MAX || !name.chars().all(allowed) {
        return Err(format!(
            "a client's name is 1 to {NAME_MAX} ASCII letters, digits, `.`, `_` or `-`"
        ));
    }
    Ok(())
}

/// Whether two keys are equal, in time that depends on their lengths only.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_file_names_each_client_once_and_errors_never_show_a_key() {
        let keys = ClientKeys::parse(
            "# name key\n\nalice  sk-alice-0123456789\n  bob\tsk-bob-0123456789abc  \n",
        )
        .unwrap();
        assert_eq!(keys.names().collect::<Vec<_>>(), ["alice", "bob"]);
        assert_eq!(keys.client("sk-alice-0123456789"), Some("alice"));
        assert_eq!(keys.client("sk-bob-0123456789abc"), Some("bob"));
        assert_eq!(keys.client("sk-alice-012345678"), None);
        assert_eq!(keys.client(""), None);
        let shown = format!("{keys:?}");
        assert!(!shown.contains("sk-"), "{shown}");
        for (text, says) in [
            ("alice sk-short", "shorter than 16"),
            ("alice", "a client's name and its key"),
            (
                "alice sk-alice-0123456789 more",
                "a client's name and its key",
            ),
            ("al/ice sk-alice-0123456789", "ASCII letters"),
            (
                "alice sk-alice-0123456789\nalice sk-alice-9876543210",
                "named twice",
            ),
            (
                "alice sk-alice-0123456789\nbob sk-alice-0123456789",
                "another client's too",
            ),
            ("# nobody\n", "names no client"),
        ] {
            let error = ClientKeys::parse(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
            assert!(!error.contains("sk-"), "a key shown: {error}");
        }
    }
}
