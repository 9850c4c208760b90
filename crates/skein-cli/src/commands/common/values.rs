/*!
Value parsers for options several commands share: sizes (`--max-input`,
`serve --body-limit`) and cut-off times (`delete --older-than`, `replay
--since`/`--until`), and the help of `--compare` (`replay`, `rerun`),
written from the comparators' registry.
*/

/// A size in bytes: a number, optionally followed by `K`, `M` or `G`
/// (powers of 1024, with or without `iB`).
pub fn parse_size(value: &str) -> Result<u64, String> {
    let trimmed = value.trim();
    let digits = trimmed.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &trimmed[digits.len()..];
    let scale: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => 0,
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            format!("`{value}` is not a size: write a number of bytes, or a number with K, M or G")
        })
}

/// `--older-than`: an age or a date, as `[retention]` takes it.
pub fn parse_cutoff(value: &str) -> Result<i64, String> {
    skein::retention::parse_cutoff(value)
}

/// The help of a `--compare SPEC` option: every comparator of the registry
/// (`skein::recorded::compare::REGISTRY`), and the default.
pub fn compare_help() -> String {
    format!(
        "A comparator (repeatable, asked in order; the first that says changed decides): {} \
         (default: specifics, then embedding)",
        skein::recorded::compare::usages()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
    }
}
