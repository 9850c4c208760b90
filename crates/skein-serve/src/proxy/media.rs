/*!
Media a client sends inline (images, documents, audio) as attachment parts.

Every wire API carries bytes its own way: OpenAI chat completions as a
`data:` URL (`image_url`, `file.file_data`) or bare base64 with a format
(`input_audio`), the Responses API as a `data:` URL (`input_image`,
`input_file`), Anthropic as base64 with a media type (`image`, `document`)
or plain text (a text `document`). All of them become the same
[`Attachment`]: the decoded bytes and their media type, so an image sent
through any API is the same part (and, in the store, one blob by digest).

Media the proxy would have to fetch (an `https:` URL, a file id of the
provider's files API) is refused: the proxy records what the model saw,
and it never reaches out on a client's behalf.
*/

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use skein::core::Attachment;

/// An attachment from a `data:` URL (`data:<media type>;base64,<data>`).
pub fn from_data_url(url: &str) -> Result<Attachment, String> {
    let Some(rest) = url.strip_prefix("data:") else {
        let shown: String = url.chars().take(40).collect();
        return Err(format!(
            "the recording proxy takes media inline, as a `data:<type>;base64,...` URL; \
             it does not fetch `{shown}`"
        ));
    };
    let Some((header, data)) = rest.split_once(',') else {
        return Err("a `data:` URL needs a `,` before its data".into());
    };
    let mut fields = header.split(';');
    let media_type = fields.next().unwrap_or_default();
    if !fields.any(|field| field.eq_ignore_ascii_case("base64")) {
        return Err("a `data:` URL must be base64 (`data:<type>;base64,...`)".into());
    }
    from_base64(media_type, data)
}

/// An attachment from base64 data and its media type.
pub fn from_base64(media_type: &str, data: &str) -> Result<Attachment, String> {
    let media_type = media_type.trim().to_ascii_lowercase();
    if !is_media_type(&media_type) {
        return Err(format!(
            "`{media_type}` is not a media type (`type/subtype`, e.g. `image/png`)"
        ));
    }
    let data = STANDARD
        .decode(data.trim().as_bytes())
        .map_err(|problem| format!("the `{media_type}` data is not valid base64: {problem}"))?;
    if data.is_empty() {
        return Err(format!("the `{media_type}` data is empty"));
    }
    Ok(Attachment { media_type, data })
}

/// An attachment of plain text (Anthropic's text `document` source).
pub fn from_text(media_type: &str, text: &str) -> Attachment {
    Attachment {
        media_type: media_type.to_ascii_lowercase(),
        data: text.as_bytes().to_vec(),
    }
}

/// The media type of an audio format name (`wav`, `mp3`).
pub fn audio_type(format: &str) -> Result<&'static str, String> {
    match format {
        "wav" => Ok("audio/wav"),
        "mp3" => Ok("audio/mpeg"),
        other => Err(format!(
            "audio format `{other}` is not supported (wav, mp3)"
        )),
    }
}

/// `type/subtype`, each a token of letters, digits and `!#$&^_.+-`.
fn is_media_type(text: &str) -> bool {
    let token = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    text.split_once('/')
        .is_some_and(|(kind, sub)| token(kind) && token(sub))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_encoding_of_the_same_bytes_is_the_same_attachment() {
        let png = [0x89u8, b'P', b'N', b'G', 0, 1, 2, 255];
        let encoded = STANDARD.encode(png);
        let from_url = from_data_url(&format!("data:image/png;base64,{encoded}")).unwrap();
        let from_block = from_base64("image/png", &encoded).unwrap();
        let upper = from_data_url(&format!("data:IMAGE/PNG;BASE64,{encoded}")).unwrap();
        assert_eq!(from_url, from_block);
        assert_eq!(from_url, upper);
        assert_eq!(from_url.data, png);
    }

    #[test]
    fn what_cannot_be_decoded_or_must_be_fetched_is_refused_clearly() {
        let remote = from_data_url("https://example.com/cat.png").unwrap_err();
        assert!(remote.contains("does not fetch"), "{remote}");
        assert!(
            from_data_url("data:image/png,abc")
                .unwrap_err()
                .contains("base64")
        );
        assert!(
            from_data_url("data:image/png;base64")
                .unwrap_err()
                .contains("`,`")
        );
        assert!(
            from_base64("image/png", "not base64!")
                .unwrap_err()
                .contains("not valid base64")
        );
        assert!(
            from_base64("png", "AAAA")
                .unwrap_err()
                .contains("not a media type")
        );
        assert!(from_base64("image/png", "").unwrap_err().contains("empty"));
        assert_eq!(audio_type("mp3").unwrap(), "audio/mpeg");
        assert!(audio_type("ogg").is_err());
    }
}
