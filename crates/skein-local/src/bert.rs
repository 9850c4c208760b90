/*!
Converting a BERT sentence encoder (Hugging Face safetensors, a WordPiece
`vocab.txt` and `config.json`) into the GGUF llama.cpp's `bert`
architecture loads, with mean pooling. The layers' matrices are written as
f32 (the converted model computes what the original does) or f16.

Tensor names follow llama.cpp's BERT loader (`token_embd`, `position_embd`,
`token_types`, `token_embd_norm`, and per layer `attn_q/k/v`, `attn_output`,
`attn_output_norm`, `ffn_up`, `ffn_down`, `layer_output_norm`). Tokens take
llama.cpp's WordPiece form: a word-initial piece gets the phantom space
`▁`, a continuation loses its `##`, bracketed specials stay as they are.
*/

use crate::gguf::{self, Kind, Tensor, Value, f32_to_f16};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("cannot write {path}: {error}")]
    Write { path: String, error: std::io::Error },
    #[error("{path} is not a usable {what}: {problem}")]
    Malformed {
        path: String,
        what: &'static str,
        problem: String,
    },
}

/// The parts of a BERT `config.json` the conversion needs.
#[derive(Debug, Deserialize)]
struct Config {
    hidden_size: u32,
    intermediate_size: u32,
    num_attention_heads: u32,
    num_hidden_layers: u32,
    max_position_embeddings: u32,
    layer_norm_eps: f32,
    #[serde(default = "two")]
    type_vocab_size: u32,
}

fn two() -> u32 {
    2
}

#[derive(Debug, Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [usize; 2],
}

/// The GGUF name of a safetensors tensor, or `None` for one llama.cpp does
/// not use (position ids, the pooler).
fn gguf_name(name: &str) -> Option<String> {
    let fixed = match name {
        "embeddings.word_embeddings.weight" => Some("token_embd.weight"),
        "embeddings.position_embeddings.weight" => Some("position_embd.weight"),
        "embeddings.token_type_embeddings.weight" => Some("token_types.weight"),
        "embeddings.LayerNorm.weight" => Some("token_embd_norm.weight"),
        "embeddings.LayerNorm.bias" => Some("token_embd_norm.bias"),
        _ => None,
    };
    if let Some(fixed) = fixed {
        return Some(fixed.to_string());
    }
    let rest = name.strip_prefix("encoder.layer.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: u32 = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    let target = match module {
        "attention.self.query" => "attn_q",
        "attention.self.key" => "attn_k",
        "attention.self.value" => "attn_v",
        "attention.output.dense" => "attn_output",
        "attention.output.LayerNorm" => "attn_output_norm",
        "intermediate.dense" => "ffn_up",
        "output.dense" => "ffn_down",
        "output.LayerNorm" => "layer_output_norm",
        _ => return None,
    };
    Some(format!("blk.{layer}.{target}.{kind}"))
}

/// A WordPiece token in llama.cpp's form.
fn phantom(token: &str) -> String {
    if token.starts_with('[') && token.ends_with(']') {
        token.to_string()
    } else if let Some(rest) = token.strip_prefix("##") {
        rest.to_string()
    } else {
        format!("\u{2581}{token}")
    }
}

/// llama.cpp token types: 1 normal, 2 unknown, 3 control.
fn token_type(token: &str) -> i32 {
    match token {
        "[UNK]" => 2,
        "[PAD]" | "[CLS]" | "[SEP]" | "[MASK]" => 3,
        _ => 1,
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ConvertError> {
    std::fs::read(path).map_err(|source| ConvertError::Read {
        path: path.display().to_string(),
        error: source,
    })
}

/// How the layers' matrix weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F32,
    F16,
}

/// Convert the model at `weights` (with `vocab` and `config`) into a GGUF
/// at `out`, written to a partial file and moved into place.
pub fn convert(
    weights: &Path,
    vocab: &Path,
    config: &Path,
    name: &str,
    precision: Precision,
    out: &Path,
) -> Result<(), ConvertError> {
    let malformed = |path: &Path, what: &'static str, problem: String| ConvertError::Malformed {
        path: path.display().to_string(),
        what,
        problem,
    };
    let config_bytes = read(config)?;
    let config: Config = serde_json::from_slice(&config_bytes)
        .map_err(|e| malformed(config, "BERT config", e.to_string()))?;
    let vocab_text = String::from_utf8(read(vocab)?)
        .map_err(|e| malformed(vocab, "vocabulary", e.to_string()))?;
    let tokens: Vec<&str> = vocab_text.lines().collect();
    let bytes = read(weights)?;
    let bad = |problem: String| malformed(weights, "safetensors file", problem);
    if bytes.len() < 8 {
        return Err(bad("shorter than its header".into()));
    }
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header_end = 8usize
        .checked_add(header_len)
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| bad("its header runs past the end".into()))?;
    let header: HashMap<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..header_end]).map_err(|e| bad(e.to_string()))?;
    let data = &bytes[header_end..];
    let mut tensors = Vec::new();
    let mut names: Vec<&String> = header.keys().filter(|k| *k != "__metadata__").collect();
    names.sort();
    for key in names {
        let Some(target) = gguf_name(key) else {
            continue;
        };
        let entry: Entry =
            serde_json::from_value(header[key].clone()).map_err(|e| bad(format!("{key}: {e}")))?;
        if entry.dtype != "F32" {
            return Err(bad(format!(
                "{key} is {}, only F32 is supported",
                entry.dtype
            )));
        }
        let [start, end] = entry.data_offsets;
        let count: u64 = entry.shape.iter().product();
        if end < start || end > data.len() || (end - start) as u64 != count * 4 {
            return Err(bad(format!("{key} has inconsistent offsets")));
        }
        let bytes = &data[start..end];
        // Matrix weights of the layers go to f16 (half the memory traffic
        // for llama.cpp's matrix products); embeddings, norms and biases
        // stay f32.
        let (kind, data) = if precision == Precision::F16
            && entry.shape.len() == 2
            && target.starts_with("blk.")
        {
            (Kind::F16, f32_to_f16(bytes))
        } else {
            (Kind::F32, bytes.to_vec())
        };
        tensors.push(Tensor {
            name: target,
            dims: entry.shape.iter().rev().copied().collect(),
            kind,
            data,
        });
    }
    let expected = 5 + 16 * config.num_hidden_layers as usize;
    if tensors.len() != expected {
        return Err(bad(format!(
            "found {} usable tensors, expected {expected} for {} layers",
            tensors.len(),
            config.num_hidden_layers
        )));
    }
    let metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::Str("bert".into())),
        ("general.name", Value::Str(name.into())),
        (
            "general.file_type",
            Value::U32(match precision {
                Precision::F32 => 0,
                Precision::F16 => 1,
            }),
        ),
        (
            "bert.context_length",
            Value::U32(config.max_position_embeddings),
        ),
        ("bert.embedding_length", Value::U32(config.hidden_size)),
        (
            "bert.feed_forward_length",
            Value::U32(config.intermediate_size),
        ),
        ("bert.block_count", Value::U32(config.num_hidden_layers)),
        (
            "bert.attention.head_count",
            Value::U32(config.num_attention_heads),
        ),
        (
            "bert.attention.layer_norm_epsilon",
            Value::F32(config.layer_norm_eps),
        ),
        ("bert.attention.causal", Value::Bool(false)),
        ("bert.pooling_type", Value::U32(1)),
        ("tokenizer.ggml.model", Value::Str("bert".into())),
        (
            "tokenizer.ggml.tokens",
            Value::StrArray(tokens.iter().map(|t| phantom(t)).collect()),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::I32Array(tokens.iter().map(|t| token_type(t)).collect()),
        ),
        (
            "tokenizer.ggml.token_type_count",
            Value::U32(config.type_vocab_size),
        ),
        ("tokenizer.ggml.normalizer.lowercase", Value::Bool(true)),
    ];
    let partial = out.with_extension("gguf.partial");
    let write_error = |source| ConvertError::Write {
        path: partial.display().to_string(),
        error: source,
    };
    let file = std::fs::File::create(&partial).map_err(write_error)?;
    let mut writer = std::io::BufWriter::new(file);
    gguf::write(&mut writer, &metadata, &tensors).map_err(write_error)?;
    let file = writer
        .into_inner()
        .map_err(|e| write_error(e.into_error()))?;
    file.sync_all().map_err(write_error)?;
    std::fs::rename(&partial, out).map_err(|source| ConvertError::Write {
        path: out.display().to_string(),
        error: source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_tokens_take_llama_cpp_forms() {
        assert_eq!(
            gguf_name("encoder.layer.5.attention.output.LayerNorm.bias").as_deref(),
            Some("blk.5.attn_output_norm.bias")
        );
        assert_eq!(
            gguf_name("encoder.layer.0.output.dense.weight").as_deref(),
            Some("blk.0.ffn_down.weight")
        );
        assert_eq!(gguf_name("embeddings.position_ids"), None);
        assert_eq!(gguf_name("pooler.dense.weight"), None);
        assert_eq!(phantom("hello"), "\u{2581}hello");
        assert_eq!(phantom("##ing"), "ing");
        assert_eq!(phantom("[CLS]"), "[CLS]");
        assert_eq!(token_type("[SEP]"), 3);
        assert_eq!(token_type("[UNK]"), 2);
    }
}
