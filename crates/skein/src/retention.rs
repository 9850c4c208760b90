/*!
Retention and garbage collection as every surface runs them: `skein gc`
and Python's `Store.gc` apply the configuration file's `[retention]`
([`apply`]), then collect what nothing reaches in batches and rewrite the
database ([`gc`]); `skein serve` applies `[retention]` on a schedule
([`scheduled_pass`] every [`interval`]), never in two processes at once.
One implementation over [`Store::forget`], [`Store::collect_garbage_with`]
and [`Store::vacuum`].

An age is written as `skein delete --older-than` takes it ([`parse_cutoff`]):
a number and a unit, `45min`, `12h`, `30d`, `2w`, `6mo` or `1y` (months and
years are calendar ones), or a date `YYYY-MM-DD` (midnight UTC). A bare `m`
is refused, since it could mean minutes or months; so it is in `every`,
whose units are `s`, `min`, `h`, `d` and `w`.
*/

use crate::config::{ConfigError, Retention};
use serde::Serialize;
use skein_store::{Filter, Forgotten, Progress, Selection, Store, StoreError};
use std::time::Duration;

/// Why retention could not be applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetentionError {
    /// A `[retention]` age that is neither an age nor a date, or an
    /// `every` that is no interval.
    #[error("retention.{key} in {file}: {problem}")]
    Age {
        key: String,
        file: String,
        problem: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// What [`gc`] did (or in a dry run would do): each retention rule's
/// deletion, by the rule as written (`older_than = "30d"`), then the
/// collection of what nothing reaches.
#[derive(Clone, Debug, Serialize)]
pub struct Collected {
    pub retention: Vec<(String, Forgotten)>,
    pub collected: Forgotten,
}

/// Apply `rules`: each set rule deletes the conversations it selects (as
/// `skein delete --older-than`, with `--proxy` for `proxy_older_than`, and
/// `--proxy --client NAME` for `[retention.clients.NAME]`), keeping what
/// others share. A malformed age is an error before anything
/// is deleted.
pub fn apply(
    store: &Store,
    rules: &Retention,
    dry_run: bool,
) -> Result<Vec<(String, Forgotten)>, RetentionError> {
    Ok(forget_each(store, selections(rules)?, dry_run)?)
}

/// Each set rule, as written, with what it selects now.
fn selections(rules: &Retention) -> Result<Vec<(String, Filter)>, RetentionError> {
    let mut selections = Vec::new();
    for (key, age, proxy_only) in [
        ("older_than", &rules.older_than, false),
        ("proxy_older_than", &rules.proxy_older_than, true),
    ] {
        let Some(age) = age else { continue };
        let cutoff = parse_cutoff(age).map_err(|problem| misconfigured(key, problem))?;
        let mut filter = Filter::default().updated_before_ms(cutoff);
        if proxy_only {
            filter = filter.proxy_only();
        }
        selections.push((format!("{key} = \"{age}\""), filter));
    }
    for (client, rule) in &rules.clients {
        let key = format!("clients.{}.older_than", toml_key(client));
        let cutoff = parse_cutoff(&rule.older_than)
            .map_err(|problem| misconfigured(key.clone(), problem))?;
        let filter = Filter::default()
            .updated_before_ms(cutoff)
            .proxy_only()
            .client(client.clone());
        selections.push((format!("{key} = \"{}\"", rule.older_than), filter));
    }
    Ok(selections)
}

/// A client's name as a TOML key: bare when it can be, else quoted.
fn toml_key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match bare {
        true => name.to_string(),
        false => format!("{name:?}"),
    }
}

fn forget_each(
    store: &Store,
    selections: Vec<(String, Filter)>,
    dry_run: bool,
) -> Result<Vec<(String, Forgotten)>, StoreError> {
    selections
        .into_iter()
        .map(|(rule, filter)| Ok((rule, store.forget(&Selection::Matching(filter), dry_run)?)))
        .collect()
}

fn misconfigured(key: impl Into<String>, problem: String) -> RetentionError {
    RetentionError::Age {
        key: key.into(),
        file: crate::config::path().map_or_else(
            |_| "the configuration file".into(),
            |path| path.display().to_string(),
        ),
        problem,
    }
}

/// Refuse malformed rules (an age that is no age, an `every` that is no
/// interval) before anything is deleted.
pub fn check(rules: &Retention) -> Result<(), RetentionError> {
    selections(rules)?;
    interval(rules)?;
    Ok(())
}

/// Whether `rules` select anything (an `every` alone does not).
pub fn has_rules(rules: &Retention) -> bool {
    rules.older_than.is_some() || rules.proxy_older_than.is_some() || !rules.clients.is_empty()
}

/// How often `skein serve` applies `rules`: their `every` (`30s`, `15min`,
/// `6h`, `1d`), else every hour.
pub fn interval(rules: &Retention) -> Result<Duration, RetentionError> {
    match &rules.every {
        None => Ok(Duration::from_secs(3600)),
        Some(every) => parse_interval(every).map_err(|problem| misconfigured("every", problem)),
    }
}

fn parse_interval(value: &str) -> Result<Duration, String> {
    let wrong = || format!("`{value}` is not an interval (`30s`, `15min`, `6h`, `1d`, `1w`)");
    let (number, unit) = amount(value).ok_or_else(wrong)?;
    let seconds = match unit {
        "s" => 1,
        "min" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        "m" => {
            return Err(format!(
                "`{value}` is ambiguous (`m` could be minutes or months): write `{number}min` \
                 for minutes"
            ));
        }
        _ => return Err(wrong()),
    };
    let number: u64 = number.parse().map_err(|_| wrong())?;
    number
        .checked_mul(seconds)
        .filter(|&seconds| seconds > 0)
        .map(Duration::from_secs)
        .ok_or_else(wrong)
}

/// A number and the unit after it (`30d` is `("30", "d")`), or `None`
/// when `value` does not start with digits followed by letters only.
fn amount(value: &str) -> Option<(&str, &str)> {
    let at = value
        .find(|c: char| !c.is_ascii_digit())
        .filter(|&at| at > 0)?;
    let (number, unit) = value.split_at(at);
    unit.chars()
        .all(|c| c.is_ascii_alphabetic())
        .then_some((number, unit))
}

/// One pass of `skein serve`'s schedule: [`apply`] `rules`, unless another
/// process is applying them to this database now (`Ok(None)`; on
/// PostgreSQL an advisory lock says so, see [`Store::exclusively`]).
pub fn scheduled_pass(
    store: &Store,
    rules: &Retention,
) -> Result<Option<Vec<(String, Forgotten)>>, RetentionError> {
    let selections = selections(rules)?;
    Ok(store.exclusively("skein retention", || forget_each(store, selections, false))?)
}

/// [`apply`] `rules`, then delete every message nothing reaches in batches
/// (`progress` is told after each), then (not in a dry run) rewrite the
/// database without the freed bytes.
pub fn gc(
    store: &Store,
    rules: &Retention,
    dry_run: bool,
    progress: &mut dyn FnMut(Progress),
) -> Result<Collected, RetentionError> {
    let retention = apply(store, rules, dry_run)?;
    let collected = store.collect_garbage_with(dry_run, skein_store::GC_BATCH, progress)?;
    if !dry_run {
        store.vacuum()?;
    }
    Ok(Collected {
        retention,
        collected,
    })
}

/// An age (`45min`, `12h`, `30d`, `2w`, `6mo`, `1y`) or a date
/// (`YYYY-MM-DD`, midnight UTC), as the Unix time in milliseconds it means.
/// Months and years count back on the calendar (from March 31st, one month
/// is February's last day). A bare `m` is refused with what it could mean.
pub fn parse_cutoff(value: &str) -> Result<i64, String> {
    parse_cutoff_at(value, skein_store::records::now_ms())
}

/// The units an age takes, for messages.
const AGE_UNITS: &str = "`45min`, `12h`, `30d`, `2w`, `6mo`, `1y`";

fn parse_cutoff_at(value: &str, now_ms: i64) -> Result<i64, String> {
    let wrong = || {
        format!(
            "`{value}` is neither an age (a number and a unit: {AGE_UNITS}) nor a date \
             (`2026-11-01`)"
        )
    };
    if let Some(date) = parse_date(value) {
        return Ok(date);
    }
    let (number, unit) = amount(value).ok_or_else(wrong)?;
    let count: i64 = number.parse().map_err(|_| wrong())?;
    let minutes = match unit {
        "min" => 1,
        "h" => 60,
        "d" => 24 * 60,
        "w" => 7 * 24 * 60,
        "mo" => return months_before(now_ms, count).ok_or_else(wrong),
        "y" => {
            let months = count.checked_mul(12).ok_or_else(wrong)?;
            return months_before(now_ms, months).ok_or_else(wrong);
        }
        "m" => {
            return Err(format!(
                "`{value}` is ambiguous (`m` could be minutes or months): did you mean \
                 `{number}min` or `{number}mo`?"
            ));
        }
        _ => return Err(wrong()),
    };
    count
        .checked_mul(minutes * 60_000)
        .and_then(|age| now_ms.checked_sub(age))
        .ok_or_else(wrong)
}

const DAY_MS: i64 = 86_400_000;

/// The same time of day `months` calendar months before `now_ms` (a day
/// the month lacks becomes its last day).
fn months_before(now_ms: i64, months: i64) -> Option<i64> {
    if !(0..=12 * 10_000).contains(&months) {
        return None;
    }
    let (day, time) = (now_ms.div_euclid(DAY_MS), now_ms.rem_euclid(DAY_MS));
    let (year, month, date) = skein_core::calendar::civil_from_days(day);
    let index = (year * 12 + month - 1) - months;
    let (year, month) = (index.div_euclid(12), index.rem_euclid(12) + 1);
    let date = date.min(days_in_month(year, month));
    Some(skein_core::calendar::days_from_civil(year, month, date) * DAY_MS + time)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Midnight UTC of a `YYYY-MM-DD` date, in Unix milliseconds.
fn parse_date(value: &str) -> Option<i64> {
    let mut fields = value.split('-');
    let (year, month, day): (i64, i64, i64) = (
        fields.next()?.parse().ok()?,
        fields.next()?.parse().ok()?,
        fields.next()?.parse().ok()?,
    );
    if fields.next().is_some() || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    Some(skein_core::calendar::days_from_civil(year, month, day) * DAY_MS)
}

#[cfg(test)]
mod tests {
    use super::parse_cutoff_at;

    #[test]
    fn ages_count_back_from_now_and_dates_are_midnight_utc() {
        let now = 10 * 86_400_000;
        assert_eq!(parse_cutoff_at("2d", now), Ok(8 * 86_400_000));
        assert_eq!(parse_cutoff_at("1w", now), Ok(3 * 86_400_000));
        assert_eq!(parse_cutoff_at("3h", now), Ok(now - 3 * 3_600_000));
        assert_eq!(parse_cutoff_at("45min", now), Ok(now - 45 * 60_000));
        assert_eq!(parse_cutoff_at("0min", now), Ok(now));
        assert_eq!(parse_cutoff_at("1970-01-02", now), Ok(86_400_000));
        assert_eq!(parse_cutoff_at("2026-12-01", now), Ok(1_796_083_200_000));
        for bad in [
            "",
            "d",
            "30",
            "30x",
            "2026-13-01",
            "2026-1",
            "1d2h",
            "-3d",
            "5 d",
        ] {
            assert!(parse_cutoff_at(bad, now).is_err(), "{bad}");
        }
    }

    /// Months and years are calendar ones, at the same time of day; a day
    /// the month lacks is its last day.
    #[test]
    fn months_and_years_count_back_on_the_calendar() {
        let at = |date: &str, ms: i64| super::parse_date(date).unwrap() + ms;
        let now = at("2026-03-31", 45_000);
        assert_eq!(parse_cutoff_at("1mo", now), Ok(at("2026-02-28", 45_000)));
        assert_eq!(parse_cutoff_at("2mo", now), Ok(at("2026-01-31", 45_000)));
        assert_eq!(parse_cutoff_at("13mo", now), Ok(at("2025-02-28", 45_000)));
        assert_eq!(parse_cutoff_at("1y", now), Ok(at("2025-03-31", 45_000)));
        let leap = at("2024-02-29", 0);
        assert_eq!(parse_cutoff_at("1y", leap), Ok(at("2023-02-28", 0)));
        assert_eq!(parse_cutoff_at("4y", leap), Ok(at("2020-02-29", 0)));
        assert!(parse_cutoff_at("99999999999y", now).is_err());
    }

    /// `m` could be minutes or months: refused, saying both.
    #[test]
    fn a_bare_m_is_refused_with_both_readings() {
        let error = parse_cutoff_at("2m", 10 * 86_400_000).unwrap_err();
        assert!(error.contains("`2min` or `2mo`"), "{error}");
        let error = super::parse_interval("15m").unwrap_err();
        assert!(error.contains("`15min`"), "{error}");
    }

    #[test]
    fn a_client_rule_selects_that_clients_proxy_conversations_and_names_its_key() {
        use crate::config::{ClientRetention, Retention};
        let rule = |age: &str| ClientRetention {
            older_than: age.into(),
        };
        let mut rules = Retention::default();
        assert!(!super::has_rules(&rules));
        rules.clients.insert("checkout-bot".into(), rule("7d"));
        rules.clients.insert("a b".into(), rule("1h"));
        assert!(super::has_rules(&rules));
        let selected = super::selections(&rules).unwrap();
        let labels: Vec<&str> = selected.iter().map(|(label, _)| label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "clients.\"a b\".older_than = \"1h\"",
                "clients.checkout-bot.older_than = \"7d\""
            ]
        );
        let filter = &selected[1].1;
        assert_eq!(filter.client.as_deref(), Some("checkout-bot"));
        assert!(filter.proxy_only && filter.updated_before_ms.is_some());
        rules.clients.insert("late".into(), rule("soon"));
        let error = super::selections(&rules).unwrap_err().to_string();
        assert!(
            error.contains("retention.clients.late.older_than"),
            "{error}"
        );
    }

    #[test]
    fn intervals_are_seconds_to_days_and_never_zero() {
        use super::parse_interval;
        use std::time::Duration;
        assert_eq!(parse_interval("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_interval("15min"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_interval("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse_interval("6h"), Ok(Duration::from_secs(21_600)));
        assert_eq!(parse_interval("1d"), Ok(Duration::from_secs(86_400)));
        for bad in ["", "s", "0s", "5", "5y", "5m", "1h30min", "-1s"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }
}
