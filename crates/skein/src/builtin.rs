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
    let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3_600,
        of_day % 3_600 / 60,
        of_day % 60
    )
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
