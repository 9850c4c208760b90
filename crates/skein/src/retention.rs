/*!
Retention and garbage collection as every surface runs them: `skein gc`
and Python's `Store.gc` apply the configuration file's `[retention]`
([`apply`]), then collect what nothing reaches in batches and rewrite the
database ([`gc`]); `skein serve` applies `[retention]` on a schedule
([`scheduled_pass`] every [`interval`]), never in two processes at once.
One implementation over [`Store::forget`], [`Store::collect_garbage_with`]
and [`Store::vacuum`].

An age is written as `skein delete --older-than` takes it ([`parse_cutoff`]):
`30d`, `12h`, `45m`, or a date `YYYY-MM-DD` (midnight UTC).
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

/// How often `skein serve` applies `rules`: their `every` (`30s`, `15m`,
/// `6h`, `1d`), else every hour.
pub fn interval(rules: &Retention) -> Result<Duration, RetentionError> {
    match &rules.every {
        None => Ok(Duration::from_secs(3600)),
        Some(every) => parse_interval(every).map_err(|problem| misconfigured("every", problem)),
    }
}

fn parse_interval(value: &str) -> Result<Duration, String> {
    let wrong = || format!("`{value}` is not an interval (`30s`, `15m`, `6h`, `1d`)");
    let at = value
        .find(|c: char| !c.is_ascii_digit())
        .filter(|&at| at > 0)
        .ok_or_else(wrong)?;
    let (number, unit) = value.split_at(at);
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(wrong()),
    };
    let number: u64 = number.parse().map_err(|_| wrong())?;
    number
        .checked_mul(seconds)
        .filter(|&seconds| seconds > 0)
        .map(Duration::from_secs)
        .ok_or_else(wrong)
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

/// An age (`30d`, `12h`, `45m`) or a date (`YYYY-MM-DD`, midnight UTC), as
/// the Unix time in milliseconds it means.
pub fn parse_cutoff(value: &str) -> Result<i64, String> {
    parse_cutoff_at(value, skein_store::records::now_ms())
}

fn parse_cutoff_at(value: &str, now_ms: i64) -> Result<i64, String> {
    let wrong =
        || format!("`{value}` is neither an age (`30d`, `12h`, `45m`) nor a date (`2026-11-01`)");
    if let Some((number, unit)) = value
        .find(|c: char| !c.is_ascii_digit())
        .filter(|&at| at > 0)
        .map(|at| value.split_at(at))
    {
        let minutes = match unit {
            "d" => 24 * 60,
            "h" => 60,
            "m" => 1,
            _ if unit.starts_with('-') => return parse_date(value).ok_or_else(wrong),
            _ => return Err(wrong()),
        };
        let number: i64 = number.parse().map_err(|_| wrong())?;
        return number
            .checked_mul(minutes * 60_000)
            .map(|age| now_ms - age)
            .ok_or_else(wrong);
    }
    Err(wrong())
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
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400_000)
}

#[cfg(test)]
mod tests {
    use super::parse_cutoff_at;

    #[test]
    fn ages_count_back_from_now_and_dates_are_midnight_utc() {
        let now = 10 * 86_400_000;
        assert_eq!(parse_cutoff_at("2d", now), Ok(8 * 86_400_000));
        assert_eq!(parse_cutoff_at("3h", now), Ok(now - 3 * 3_600_000));
        assert_eq!(parse_cutoff_at("45m", now), Ok(now - 45 * 60_000));
        assert_eq!(parse_cutoff_at("1970-01-02", now), Ok(86_400_000));
        assert_eq!(parse_cutoff_at("2026-12-01", now), Ok(1_796_083_200_000));
        for bad in ["", "d", "30", "30y", "2026-13-01", "2026-1", "1d2h"] {
            assert!(parse_cutoff_at(bad, now).is_err(), "{bad}");
        }
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
        assert_eq!(parse_interval("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_interval("6h"), Ok(Duration::from_secs(21_600)));
        assert_eq!(parse_interval("1d"), Ok(Duration::from_secs(86_400)));
        for bad in ["", "s", "0s", "5", "5y", "1h30m", "-1s"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }
}
