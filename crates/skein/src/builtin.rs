/*!
Built-in tools, offered by name on the command line (`skein prompt -T
skein_time`) and registrable in any engine: small, side-effect free, and
useful for trying tool loops with any model.
*/

use schemars::JsonSchema;
use serde::Deserialize;
use skein_engine::{Tool, tool_fn};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Deserialize, JsonSchema)]
struct NoArguments {}

/// Every built-in tool.
pub fn all() -> Vec<Arc<dyn Tool>> {
    vec![skein_version(), skein_time()]
}

/// The names of every built-in tool.
pub fn names() -> Vec<String> {
    all().iter().map(|tool| tool.spec().name.clone()).collect()
}

/// The version of skein answering.
pub fn skein_version() -> Arc<dyn Tool> {
    tool_fn(
        "skein_version",
        "Return the version of skein that is running",
        |_: NoArguments| async { Ok::<_, Infallible>(env!("CARGO_PKG_VERSION").to_string()) },
    )
}

/// The current time in UTC.
pub fn skein_time() -> Arc<dyn Tool> {
    tool_fn(
        "skein_time",
        "Return the current date and time in UTC, as RFC 3339",
        |_: NoArguments| async {
            let seconds = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_secs() as i64);
            Ok::<_, Infallible>(rfc3339(seconds))
        },
    )
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic
/// Gregorian calendar; days to civil date after Howard Hinnant's method).
fn rfc3339(seconds: i64) -> String {
    let (year, month, day, hour, minute, second) =
        skein_core::calendar::utc(seconds.saturating_mul(1_000));
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_083_199), "2026-11-30T23:59:59Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    }
}
