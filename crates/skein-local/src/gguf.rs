/*!
A minimal GGUF (version 3) writer: metadata key/values and f32 tensors,
enough to hand llama.cpp a model converted from another format. Layout:
the header, the key/values, the tensor infos, padding to the alignment,
then each tensor's data padded to the alignment. Dimensions are written
innermost first, as ggml counts them.
*/

use std::io::{self, Write};

/// The alignment of the data section and of each tensor in it.
pub(crate) const ALIGNMENT: u64 = 32;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(String),
    StrArray(Vec<String>),
    I32Array(Vec<i32>),
}

/// A tensor: its name, its dimensions innermost first, its data.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tensor {
    pub(crate) name: String,
    pub(crate) dims: Vec<u64>,
    pub(crate) kind: Kind,
    /// Little-endian values of `kind`.
    pub(crate) data: Vec<u8>,
}

/// A tensor's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    F32,
    F16,
}

impl Kind {
    fn ggml_type(self) -> u32 {
        match self {
            Kind::F32 => 0,
            Kind::F16 => 1,
        }
    }
}

/// Little-endian f32s as little-endian IEEE half floats, rounding to
/// nearest even (values beyond the half range become infinities).
pub(crate) fn f32_to_f16(data: &[u8]) -> Vec<u8> {
    data.chunks_exact(4)
        .flat_map(|c| {
            let bits = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            half_bits(bits).to_le_bytes()
        })
        .collect()
}

fn half_bits(bits: u32) -> u16 {
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exponent = ((bits >> 23) & 0xff) as i32;
    let mantissa = bits & 0x007f_ffff;
    if exponent == 0xff {
        // Infinity or NaN (keep NaN a NaN).
        return sign | 0x7c00 | if mantissa != 0 { 0x0200 } else { 0 };
    }
    let unbiased = exponent - 127;
    if unbiased > 15 {
        return sign | 0x7c00;
    }
    if unbiased >= -14 {
        // Normal half: 10 mantissa bits, round to nearest even.
        let mut half = (((unbiased + 15) as u32) << 10) | (mantissa >> 13);
        let rest = mantissa & 0x1fff;
        if rest > 0x1000 || (rest == 0x1000 && half & 1 == 1) {
            half += 1;
        }
        return sign | half as u16;
    }
    if unbiased < -25 {
        return sign;
    }
    // Subnormal half.
    let full = mantissa | 0x0080_0000;
    let shift = (-unbiased - 14 + 13) as u32;
    let mut half = full >> shift;
    let rest = full & ((1 << shift) - 1);
    let halfway = 1 << (shift - 1);
    if rest > halfway || (rest == halfway && half & 1 == 1) {
        half += 1;
    }
    sign | half as u16
}

const TYPE_U32: u32 = 4;
const TYPE_I32: u32 = 5;
const TYPE_F32: u32 = 6;
const TYPE_BOOL: u32 = 7;
const TYPE_STRING: u32 = 8;
const TYPE_ARRAY: u32 = 9;

fn string(out: &mut impl Write, text: &str) -> io::Result<()> {
    out.write_all(&(text.len() as u64).to_le_bytes())?;
    out.write_all(text.as_bytes())
}

fn value(out: &mut impl Write, value: &Value) -> io::Result<()> {
    match value {
        Value::U32(v) => {
            out.write_all(&TYPE_U32.to_le_bytes())?;
            out.write_all(&v.to_le_bytes())
        }
        Value::F32(v) => {
            out.write_all(&TYPE_F32.to_le_bytes())?;
            out.write_all(&v.to_le_bytes())
        }
        Value::Bool(v) => {
            out.write_all(&TYPE_BOOL.to_le_bytes())?;
            out.write_all(&[u8::from(*v)])
        }
        Value::Str(v) => {
            out.write_all(&TYPE_STRING.to_le_bytes())?;
            string(out, v)
        }
        Value::StrArray(items) => {
            out.write_all(&TYPE_ARRAY.to_le_bytes())?;
            out.write_all(&TYPE_STRING.to_le_bytes())?;
            out.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|item| string(out, item))
        }
        Value::I32Array(items) => {
            out.write_all(&TYPE_ARRAY.to_le_bytes())?;
            out.write_all(&TYPE_I32.to_le_bytes())?;
            out.write_all(&(items.len() as u64).to_le_bytes())?;
            items
                .iter()
                .try_for_each(|item| out.write_all(&item.to_le_bytes()))
        }
    }
}

fn padding(position: u64) -> usize {
    ((ALIGNMENT - position % ALIGNMENT) % ALIGNMENT) as usize
}

/// Counts the bytes written through it.
struct Counting<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Write a GGUF file.
pub(crate) fn write(
    out: impl Write,
    metadata: &[(&str, Value)],
    tensors: &[Tensor],
) -> io::Result<()> {
    let mut out = Counting {
        inner: out,
        written: 0,
    };
    out.write_all(b"GGUF")?;
    out.write_all(&3u32.to_le_bytes())?;
    out.write_all(&(tensors.len() as u64).to_le_bytes())?;
    out.write_all(&(metadata.len() as u64).to_le_bytes())?;
    for (key, v) in metadata {
        string(&mut out, key)?;
        value(&mut out, v)?;
    }
    let mut offset = 0u64;
    for tensor in tensors {
        string(&mut out, &tensor.name)?;
        out.write_all(&(tensor.dims.len() as u32).to_le_bytes())?;
        for dim in &tensor.dims {
            out.write_all(&dim.to_le_bytes())?;
        }
        out.write_all(&tensor.kind.ggml_type().to_le_bytes())?;
        out.write_all(&offset.to_le_bytes())?;
        let len = tensor.data.len() as u64;
        offset += len + padding(len) as u64;
    }
    let pad = padding(out.written);
    out.write_all(&vec![0u8; pad])?;
    for tensor in tensors {
        out.write_all(&tensor.data)?;
        out.write_all(&vec![0u8; padding(tensor.data.len() as u64)])?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_header_metadata_infos_then_aligned_data() {
        let mut bytes = Vec::new();
        let tensor = Tensor {
            name: "t".into(),
            dims: vec![3],
            kind: Kind::F32,
            data: [1f32, 2.0, 3.0]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        };
        write(&mut bytes, &[("k", Value::U32(7))], &[tensor]).unwrap();
        assert_eq!(&bytes[..4], b"GGUF");
        assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 3);
        assert_eq!(u64::from_le_bytes(bytes[8..16].try_into().unwrap()), 1);
        assert_eq!(u64::from_le_bytes(bytes[16..24].try_into().unwrap()), 1);
        // key "k": length 1, then the byte, then type 4, then 7.
        assert_eq!(&bytes[24..33], &[1, 0, 0, 0, 0, 0, 0, 0, b'k']);
        assert_eq!(
            u32::from_le_bytes(bytes[33..37].try_into().unwrap()),
            TYPE_U32
        );
        let data_start = bytes.len() - 32;
        assert_eq!(data_start % 32, 0);
        assert_eq!(
            f32::from_le_bytes(bytes[data_start + 4..data_start + 8].try_into().unwrap()),
            2.0
        );
    }

    #[test]
    fn halves_round_to_nearest_even() {
        let half = |x: f32| half_bits(x.to_bits());
        assert_eq!(half(1.0), 0x3c00);
        assert_eq!(half(-2.0), 0xc000);
        assert_eq!(half(0.0), 0);
        assert_eq!(half(65504.0), 0x7bff);
        assert_eq!(half(1e6), 0x7c00);
        assert_eq!(half(5.960_464_5e-8), 0x0001, "the smallest subnormal");
        assert_eq!(half(1.0 + 1.0 / 2048.0), 0x3c00, "a tie rounds to even");
        assert_eq!(half(1.0 + 3.0 / 2048.0), 0x3c02);
        assert_eq!(half(0.333_333_34), 0x3555);
    }
}
