/*!
Retry decisions: which statuses are worth retrying, how long to wait
(backoff with full jitter, see [`RetryPolicy`]), and the server's own
`Retry-After` (whole or fractional seconds, or an IMF-fixdate HTTP date such
as `Sun, 06 Nov 1994 08:49:37 GMT`) and `retry-after-ms` headers.

Retried statuses: 429, 500, 502, 503 and 529 (Anthropic's "overloaded").
Never retried: any other status, in particular 400, 401, 403 and 404.

Jitter needs no random-number crate: each draw hashes a counter with the
standard library's randomly keyed `RandomState`.
*/

use super::config::RetryPolicy;
use reqwest::header::HeaderMap;
use std::hash::BuildHasher;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Whether a response status is worth another attempt.
pub(crate) fn is_retryable_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 529)
}

/// The wait before retry number `retry` (1-based) by the policy alone.
pub(crate) fn backoff(policy: &RetryPolicy, retry: u32) -> Duration {
    let ceiling = backoff_ceiling(policy, retry);
    if policy.jitter {
        scale(ceiling, random_u64())
    } else {
        ceiling
    }
}

/// `min(max_delay, base_delay * 2^(retry-1))`, without overflow.
pub(crate) fn backoff_ceiling(policy: &RetryPolicy, retry: u32) -> Duration {
    let exponent = retry.saturating_sub(1).min(31);
    policy
        .base_delay
        .checked_mul(1u32 << exponent)
        .map_or(policy.max_delay, |delay| delay.min(policy.max_delay))
}

/// A uniformly random duration in `[0, ceiling]` from a random word.
fn scale(ceiling: Duration, random: u64) -> Duration {
    let nanos = ceiling.as_nanos().min(u64::MAX as u128);
    let scaled = (random as u128 * (nanos + 1)) >> 64;
    Duration::from_nanos(scaled as u64)
}

fn random_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::collections::hash_map::RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The server's requested wait, from `retry-after-ms` (preferred, as
/// OpenAI sends it) or `Retry-After`.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(ms) = header("retry-after-ms").and_then(parse_seconds) {
        return Some(ms / 1000);
    }
    let value = header("retry-after")?;
    parse_seconds(value).or_else(|| {
        let at = parse_http_date(value)?;
        Some(at.duration_since(now).unwrap_or(Duration::ZERO))
    })
}

/// A non-negative decimal number of seconds (or of milliseconds, for the
/// caller dividing by 1000 afterwards).
fn parse_seconds(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    Duration::try_from_secs_f64(value).ok()
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub(crate) fn parse_http_date(text: &str) -> Option<SystemTime> {
    let mut fields = text.trim().split_ascii_whitespace();
    let _weekday = fields.next()?.strip_suffix(',')?;
    let day: u32 = fields.next()?.parse().ok()?;
    let month = match fields.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = fields.next()?.parse().ok()?;
    let mut clock = fields.next()?.split(':');
    let hour: u64 = clock.next()?.parse().ok()?;
    let minute: u64 = clock.next()?.parse().ok()?;
    let second: u64 = clock.next()?.parse().ok()?;
    if fields.next()? != "GMT" || fields.next().is_some() || clock.next().is_some() {
        return None;
    }
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = skein_core::calendar::days_from_civil(year, i64::from(month), i64::from(day));
    let seconds = u64::try_from(days).ok()? * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn retried_statuses_are_exactly_the_documented_ones() {
        for status in [429, 500, 502, 503, 529] {
            assert!(is_retryable_status(status), "{status}");
        }
        for status in [200, 400, 401, 403, 404, 408, 413, 422, 501, 504] {
            assert!(!is_retryable_status(status), "{status}");
        }
    }

    #[test]
    fn retry_after_reads_seconds_milliseconds_and_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1")]), now),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2.5")]), now),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "1"), ("retry-after-ms", "250")]),
                now
            ),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:49:47 GMT")]),
                now
            ),
            Some(Duration::from_secs(10))
        );
        // A date in the past means "now".
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]),
                now
            ),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn http_dates_parse_to_the_right_instant() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(784_111_777))
        );
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH)
        );
        assert_eq!(
            parse_http_date("Tue, 29 Feb 2028 12:00:00 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(1_835_438_400))
        );
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 PST"), None);
        assert_eq!(parse_http_date("Sun, 06 Foo 1994 08:49:37 GMT"), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let policy = RetryPolicy {
            max_retries: 10,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            jitter: false,
        };
        assert_eq!(backoff(&policy, 1), Duration::from_millis(500));
        assert_eq!(backoff(&policy, 2), Duration::from_secs(1));
        assert_eq!(backoff(&policy, 3), Duration::from_secs(2));
        assert_eq!(backoff(&policy, 7), Duration::from_secs(30));
        assert_eq!(backoff(&policy, 1000), Duration::from_secs(30));
    }

    #[test]
    fn full_jitter_stays_within_the_ceiling_and_varies() {
        let policy = RetryPolicy::default();
        let draws: Vec<Duration> = (0..64).map(|_| backoff(&policy, 2)).collect();
        assert!(draws.iter().all(|delay| *delay <= Duration::from_secs(1)));
        assert!(draws.iter().any(|delay| *delay != draws[0]));
        assert_eq!(scale(Duration::from_secs(1), 0), Duration::ZERO);
        assert_eq!(
            scale(Duration::from_secs(1), u64::MAX),
            Duration::from_secs(1)
        );
    }
}
