//! The one way messages show a duration: rounded to three significant digits in the largest
//! unit under it (`2.03 ms`, `500 ms`, `1.5 s`, `10 s`), and from a minute on in whole units
//! (`1 min 30 s`, `2 h 5 min`, `3 d 4 h`). Core's errors write their durations so, and the
//! `fencelock` command its messages.

use std::time::Duration;

/// `duration` for a message; see the module's docs.
pub fn shown(duration: Duration) -> String {
    const MINUTE: u64 = 60;
    const HOUR: u64 = 60 * MINUTE;
    const DAY: u64 = 24 * HOUR;
    let nanos = duration.as_nanos();
    if nanos < 1_000 {
        return format!("{nanos} ns");
    }
    // Below a minute: three significant digits of the largest unit that keeps the value
    // under 1000 (under a minute, in seconds).
    for (unit, per, limit) in [("µs", 1e3, 1000.0), ("ms", 1e6, 1000.0), ("s", 1e9, 59.95)] {
        let value = nanos as f64 / per;
        let text = significant(value);
        if value < limit && text != "1000" {
            return format!("{text} {unit}");
        }
    }
    // A minute or more: whole units, the two largest.
    let seconds = duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() >= 500_000_000));
    let (big, big_unit, small, small_unit) = if seconds < HOUR {
        (seconds / MINUTE, "min", seconds % MINUTE, "s")
    } else if seconds < DAY {
        let minutes = seconds.saturating_add(MINUTE / 2) / MINUTE;
        (minutes / 60, "h", minutes % 60, "min")
    } else {
        let hours = seconds.saturating_add(HOUR / 2) / HOUR;
        (hours / 24, "d", hours % 24, "h")
    };
    if small == 0 {
        format!("{big} {big_unit}")
    } else {
        format!("{big} {big_unit} {small} {small_unit}")
    }
}

/// `value` (at least 1) with three significant digits, trailing zeros dropped.
fn significant(value: f64) -> String {
    let text = if value >= 99.95 {
        format!("{value:.0}")
    } else if value >= 9.995 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    };
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_owned(),
        false => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        for (duration, text) in [
            (Duration::ZERO, "0 ns"),
            (Duration::from_nanos(999), "999 ns"),
            (Duration::from_nanos(1_000), "1 µs"),
            (Duration::from_nanos(12_345), "12.3 µs"),
            (Duration::from_nanos(999_999), "1 ms"),
            (Duration::from_nanos(2_027_819), "2.03 ms"),
            (Duration::from_millis(500), "500 ms"),
            (Duration::from_micros(12_500), "12.5 ms"),
            (Duration::from_micros(999_700), "1 s"),
            (Duration::from_millis(1_500), "1.5 s"),
            (Duration::from_secs(10), "10 s"),
            (Duration::from_millis(59_940), "59.9 s"),
            (Duration::from_millis(59_960), "1 min"),
            (Duration::from_secs(60), "1 min"),
            (Duration::from_secs(90), "1 min 30 s"),
            (Duration::from_secs(3_600), "1 h"),
            (Duration::from_secs(2 * 3_600 + 5 * 60 + 10), "2 h 5 min"),
            (Duration::from_secs(3 * 86_400 + 4 * 3_600), "3 d 4 h"),
            (Duration::from_secs(100 * 31_557_600), "36525 d"),
            (Duration::MAX, "213503982334601 d 7 h"),
        ] {
            assert_eq!(shown(duration), text, "{duration:?}");
        }
    }
}
