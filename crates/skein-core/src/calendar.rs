/*!
The one calendar every crate uses: civil (proleptic Gregorian) dates and
days since 1970-01-01, both ways, after Howard Hinnant's `civil_from_days`
and `days_from_civil`. Exact for every `i64` day a timestamp in
milliseconds can name; no time zones (everything skein shows is UTC).
*/

/// The civil date `(year, month 1..=12, day 1..=31)` of a day since
/// 1970-01-01 (negative before it).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
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
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

/// Days since 1970-01-01 of the civil date `year-month-day` (month
/// 1..=12; a day past the month's end counts on into the next).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// A Unix time in milliseconds as its UTC date and time of day:
/// `(year, month, day, hour, minute, second)`.
pub fn utc(ms: i64) -> (i64, i64, i64, i64, i64, i64) {
    let seconds = ms.div_euclid(1_000);
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let of_day = seconds.rem_euclid(86_400);
    (
        year,
        month,
        day,
        of_day / 3_600,
        of_day % 3_600 / 60,
        of_day % 60,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_days_convert_both_ways() {
        for (days, date) in [
            (0, (1970, 1, 1)),
            (-1, (1969, 12, 31)),
            (10_957, (2000, 1, 1)),
            (11_016, (2000, 2, 29)),
            (19_723, (2024, 1, 1)),
            (20_793, (2026, 12, 6)),
            (-719_468, (0, 3, 1)),
        ] {
            assert_eq!(civil_from_days(days), date, "day {days}");
            assert_eq!(days_from_civil(date.0, date.1, date.2), days, "{date:?}");
        }
    }

    #[test]
    fn every_day_of_four_centuries_round_trips_in_order() {
        let mut previous = civil_from_days(-150_000);
        for days in -149_999..150_000 {
            let date = civil_from_days(days);
            assert!(date > previous, "{previous:?} then {date:?}");
            assert!((1..=12).contains(&date.1) && (1..=31).contains(&date.2));
            assert_eq!(days_from_civil(date.0, date.1, date.2), days);
            previous = date;
        }
    }

    #[test]
    fn a_timestamp_reads_as_its_utc_date_and_time() {
        assert_eq!(utc(1_796_547_431_617), (2026, 12, 6, 8, 57, 11));
        assert_eq!(utc(-1), (1969, 12, 31, 23, 59, 59));
    }
}
