/*!
An MCP tool result as the text of a tool result part.

A tool result in skein's graph is text; an MCP result is a list of content
blocks. Text blocks and embedded text resources are kept as they are;
binary content (images, audio, blobs) is named with its type and size,
since a text part cannot carry it; blocks are joined by newlines. A result
with no content blocks is its structured content as JSON (the spec asks
servers to send both, so this is for servers that do not).
*/

use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

/// The text of `result`.
pub(crate) fn text_of(result: &CallToolResult) -> String {
    if result.content.is_empty() {
        return match &result.structured_content {
            Some(value) => value.to_string(),
            None => String::new(),
        };
    }
    result
        .content
        .iter()
        .map(block_text)
        .collect::<Vec<_>>()
        .join("\n")
}

fn block_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => binary("image", &image.mime_type, &image.data),
        ContentBlock::Audio(audio) => binary("audio", &audio.mime_type, &audio.data),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => format!(
                "[resource {uri}: {}]",
                binary_size(
                    mime_type.as_deref().unwrap_or("application/octet-stream"),
                    blob
                )
            ),
            _ => "[a resource of a kind skein cannot show]".to_string(),
        },
        ContentBlock::ResourceLink(resource) => format!("[resource link: {}]", resource.uri),
        _ => "[content of a kind skein cannot show]".to_string(),
    }
}

fn binary(kind: &str, media_type: &str, base64: &str) -> String {
    format!("[{kind}: {}]", binary_size(media_type, base64))
}

fn binary_size(media_type: &str, base64: &str) -> String {
    match base64::engine::general_purpose::STANDARD.decode(base64) {
        Ok(bytes) => format!("{media_type}, {} bytes", bytes.len()),
        Err(_) => format!("{media_type}, data that is not base64"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(value: serde_json::Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn text_is_kept_and_binary_content_is_named_with_its_size() {
        let shown = text_of(&result(json!({
            "content": [
                {"type": "text", "text": "  two\nlines "},
                {"type": "image", "data": "AAEC", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}},
                {"type": "resource", "resource": {"uri": "file:///b", "blob": "!!", "mimeType": "application/pdf"}}
            ]
        })));
        assert_eq!(
            shown,
            "  two\nlines \n[image: image/png, 3 bytes]\ninside\n[resource file:///b: application/pdf, data that is not base64]"
        );
        assert_eq!(
            text_of(&result(
                json!({"content": [], "structuredContent": {"a": 1}})
            )),
            r#"{"a":1}"#
        );
        assert_eq!(text_of(&result(json!({"content": []}))), "");
    }
}
