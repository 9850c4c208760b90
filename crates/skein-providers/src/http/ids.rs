/*!
Tool-call ids as each provider accepts them, mapped in the adapter only.

Stored nodes keep the id the producing model gave (OpenAI's `call_...`,
Anthropic's `toolu_...`, skein's deterministic `call_<hex>`, or whatever a
compatible server invented). When a thread moves to a provider that would
reject an id, the adapter replaces it on the wire by a deterministic
stand-in derived from the id alone, so a tool call and its result, mapped
independently, still match:

- Anthropic requires `^[a-zA-Z0-9_-]+$`; other ids become `skein_` and the
  first 24 hex digits of the id's BLAKE3 hash.
- OpenAI accepts ids of at most 40 characters; longer (or empty) ids
  become `call_` and the same 24 hex digits.
*/

use std::borrow::Cow;

fn digest_hex(id: &str) -> String {
    blake3::hash(id.as_bytes()).to_hex()[..24].to_owned()
}

/// The id sent to Anthropic for a stored call id.
pub(crate) fn anthropic_tool_id(id: &str) -> Cow<'_, str> {
    let valid = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Cow::Borrowed(id)
    } else {
        Cow::Owned(format!("skein_{}", digest_hex(id)))
    }
}

/// The id sent to an OpenAI-compatible server for a stored call id.
pub(crate) fn openai_tool_id(id: &str) -> Cow<'_, str> {
    if !id.is_empty() && id.chars().count() <= 40 {
        Cow::Borrowed(id)
    } else {
        Cow::Owned(format!("call_{}", digest_hex(id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_ids_pass_unchanged() {
        assert_eq!(anthropic_tool_id("call_0a1b2c"), "call_0a1b2c");
        assert_eq!(anthropic_tool_id("toolu_01A09q-90"), "toolu_01A09q-90");
        assert_eq!(
            openai_tool_id("toolu_01A09q90qw90lq917835lq9"),
            "toolu_01A09q90qw90lq917835lq9"
        );
    }

    #[test]
    fn invalid_ids_map_deterministically_and_validly() {
        let mapped = anthropic_tool_id("functions.lookup:0");
        assert_eq!(mapped, anthropic_tool_id("functions.lookup:0"));
        assert_ne!(mapped, anthropic_tool_id("functions.lookup:1"));
        assert!(mapped.starts_with("skein_"));
        assert!(anthropic_tool_id(&mapped) == mapped);
        assert!(anthropic_tool_id("").starts_with("skein_"));
        let long = "x".repeat(41);
        assert_eq!(openai_tool_id(&long).len(), "call_".len() + 24);
        assert!(openai_tool_id("").starts_with("call_"));
    }
}
