/*!
The names a model sees for an MCP server's tools: `SERVER__TOOL`.

OpenAI accepts tool names of 1 to 64 characters among `A-Z a-z 0-9 _ -`,
Anthropic the same set up to 128; MCP tool names may also hold `.` and be
longer, and two servers may both have a `search`. So a tool is offered as
its server's name, `__`, and its own name with every other character
replaced by `_`; a name that would pass 64 characters is cut and ends with
`_` and 8 hex digits of the BLAKE3 hash of the tool's own name, so it stays
unique. A server's name may not contain `__` nor end with `_`, so the
first `__` of an offered name always ends the server's name.
*/

use skein_core::Digest;

/// What separates a server's name from its tool's.
pub const SEPARATOR: &str = "__";
/// The longest tool name every provider accepts (OpenAI's limit).
pub const MAX_TOOL_NAME: usize = 64;
/// The longest server name (so its tools' names keep room of their own).
pub const MAX_SERVER_NAME: usize = 32;

/// Why `name` cannot name a server, or `None` when it can.
pub fn server_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("it is empty");
    }
    if name.len() > MAX_SERVER_NAME {
        return Some("it is longer than 32 characters");
    }
    if !name.chars().all(allowed) {
        return Some("only ASCII letters, digits, `_` and `-` may be used");
    }
    if name.contains(SEPARATOR) || name.ends_with('_') {
        return Some(
            "it may not contain `__` nor end with `_` (`__` separates it from tool names)",
        );
    }
    None
}

/// The name a model sees for `server`'s tool `tool`.
pub fn offered_name(server: &str, tool: &str) -> String {
    let cleaned: String = tool
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .collect();
    let name = format!("{server}{SEPARATOR}{cleaned}");
    if name.len() <= MAX_TOOL_NAME {
        return name;
    }
    let hash = &Digest::of(tool.as_bytes()).to_hex()[..8];
    // Every character is ASCII by now, so any byte is a boundary.
    format!("{}_{hash}", &name[..MAX_TOOL_NAME - 9])
}

/// The server's name in an offered name, or `None` when it has no `__`.
pub fn server_of(offered: &str) -> Option<&str> {
    offered
        .split_once(SEPARATOR)
        .map(|(server, _)| server)
        .filter(|server| !server.is_empty())
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_names_are_valid_for_every_provider_and_lead_back_to_their_server() {
        assert_eq!(offered_name("files", "read"), "files__read");
        assert_eq!(offered_name("files", "dir.list"), "files__dir_list");
        let long = "x".repeat(100);
        let offered = offered_name("files", &long);
        assert_eq!(offered.len(), MAX_TOOL_NAME);
        assert_ne!(offered, offered_name("files", &"x".repeat(99)));
        for name in [offered_name("a", "été/ü"), offered] {
            assert!(name.chars().all(allowed), "{name}");
            assert_eq!(server_of(&name), Some(name.split("__").next().unwrap()));
        }
        assert_eq!(server_of("my_server__tool__x"), Some("my_server"));
        assert_eq!(server_of("skein_time"), None);
        assert_eq!(server_of("__x"), None);
    }

    #[test]
    fn server_names_that_would_make_offered_names_ambiguous_are_refused() {
        assert_eq!(server_name_problem("my-server_2"), None);
        for bad in ["", "a.b", "a b", "a__b", "a_", &"x".repeat(33)] {
            assert!(server_name_problem(bad).is_some(), "{bad:?}");
        }
    }
}
