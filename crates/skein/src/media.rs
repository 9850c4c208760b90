/*!
The media type of an attached file (the CLI's `-a`, Python's
`skein.Attachment`): told from its first bytes (the formats models take:
images, PDF, audio, video), else from its name's extension, else
`text/plain` when it is UTF-8 text. What none of these recognise has no
type, and the caller gives one (`--at FILE TYPE`, `type=`).
*/

use std::path::Path;

/// The media type of `bytes`, read from the file `name` (none for stdin).
pub fn sniff(bytes: &[u8], name: Option<&Path>) -> Option<&'static str> {
    magic(bytes)
        .or_else(|| {
            let extension = name?.extension()?.to_str()?.to_ascii_lowercase();
            by_extension(&extension)
        })
        .or_else(|| std::str::from_utf8(bytes).is_ok().then_some("text/plain"))
}

/// Whether `media_type` looks like `type/subtype`.
pub fn is_media_type(media_type: &str) -> bool {
    let token = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$&-^_.+".contains(c))
    };
    media_type
        .split_once('/')
        .is_some_and(|(kind, subtype)| token(kind) && token(subtype))
}

fn magic(bytes: &[u8]) -> Option<&'static str> {
    let at = |offset: usize, signature: &[u8]| {
        bytes.get(offset..offset + signature.len()) == Some(signature)
    };
    Some(if at(0, b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if at(0, b"\xff\xd8\xff") {
        "image/jpeg"
    } else if at(0, b"GIF87a") || at(0, b"GIF89a") {
        "image/gif"
    } else if at(0, b"RIFF") && at(8, b"WEBP") {
        "image/webp"
    } else if at(0, b"RIFF") && at(8, b"WAVE") {
        "audio/wav"
    } else if at(0, b"%PDF-") {
        "application/pdf"
    } else if at(0, b"ID3") || (bytes.len() > 1 && bytes[0] == 0xff && bytes[1] & 0xe0 == 0xe0) {
        "audio/mpeg"
    } else if at(0, b"OggS") {
        "audio/ogg"
    } else if at(0, b"fLaC") {
        "audio/flac"
    } else if at(4, b"ftypM4A") {
        "audio/mp4"
    } else if at(4, b"ftyp") {
        "video/mp4"
    } else if at(0, b"\x1a\x45\xdf\xa3") {
        "video/webm"
    } else {
        return None;
    })
}

fn by_extension(extension: &str) -> Option<&'static str> {
    Some(match extension {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "ogg" => "audio/ogg",
        "flac" => "audio/flac",
        "m4a" => "audio/mp4",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "txt" => "text/plain",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        "json" => "application/json",
        "xml" => "application/xml",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_comes_first_then_the_name_then_text() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        assert_eq!(sniff(png, Some(Path::new("photo.jpg"))), Some("image/png"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 ", None), Some("image/webp"));
        assert_eq!(sniff(b"%PDF-1.7\n", None), Some("application/pdf"));
        assert_eq!(sniff(b"\0\0\0\x20ftypisom", None), Some("video/mp4"));
        assert_eq!(
            sniff(b"a,b\n1,2\n", Some(Path::new("t.CSV"))),
            Some("text/csv")
        );
        assert_eq!(sniff("plain é".as_bytes(), None), Some("text/plain"));
        assert_eq!(sniff(b"\0\x01\x02\xfe", Some(Path::new("blob.bin"))), None);
    }

    #[test]
    fn media_types_have_a_type_and_a_subtype() {
        assert!(is_media_type("image/png"));
        assert!(is_media_type("application/vnd.ms-excel"));
        for bad in ["png", "image/", "/png", "image/png; x=1", "ima ge/png"] {
            assert!(!is_media_type(bad), "{bad}");
        }
    }
}
