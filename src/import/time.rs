//! Reading the times and durations records carry: RFC 3339 (`2026-10-10T13:55:36.120Z`), the common log format's
//! `10/Oct/2026:13:55:36 +0000` (with or without its brackets, a fraction of a second allowed), and Unix seconds
//! with a fraction (nginx's `$msec`); durations as seconds with a fraction unless a unit is given (`120ms`).
//!
//! Not for deciding which field is which: each format's reader knows that. Written here rather than taken from a
//! date crate because these three shapes are all records use, and each is a few lines.

use faultline_units::Dur;

/// A timestamp as Unix seconds with a fraction, or why it is not one.
pub fn parse_time(text: &str) -> Result<f64, String> {
    let s = text.trim().trim_start_matches('[').trim_end_matches(']');
    if s.is_empty() {
        return Err("the time is empty".into());
    }
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return s
            .parse::<f64>()
            .map_err(|_| format!("`{s}` is not Unix seconds"));
    }
    if s.as_bytes().get(4) == Some(&b'-') {
        return rfc3339(s).ok_or_else(|| {
            format!("`{s}` is not an RFC 3339 time such as 2026-10-10T13:55:36.120Z")
        });
    }
    common_log(s).ok_or_else(|| {
        format!(
            "`{s}` is not a time (RFC 3339, 10/Oct/2026:13:55:36 +0000, or Unix seconds such as 1791640536.120)"
        )
    })
}

/// A duration: seconds with a fraction (`0.120`), or with a unit (`120ms`). `-` and empty are absent.
pub fn parse_duration(text: &str) -> Result<Option<f64>, String> {
    let s = text.trim();
    if s.is_empty() || s == "-" {
        return Ok(None);
    }
    if let Ok(v) = s.parse::<f64>() {
        if v.is_finite() && v >= 0.0 {
            return Ok(Some(v));
        }
        return Err(format!(
            "`{s}` is not a duration (a negative or endless number)"
        ));
    }
    s.parse::<Dur>()
        .map(|d| Some(d.as_secs_f64()))
        .map_err(|_| format!("`{s}` is not a duration (seconds such as 0.120, or 120ms)"))
}

/// Days from 1970-01-01 to a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn seconds(y: i64, mo: u32, d: u32, h: u32, mi: u32, s: f64, offset: i64) -> Option<f64> {
    if !(1..=12).contains(&mo)
        || !(1..=31).contains(&d)
        || h > 23
        || mi > 59
        || !(0.0..61.0).contains(&s)
    {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    Some((days * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60 - offset) as f64 + s)
}

/// `+0000`, `-05:30`, `Z`: the offset east of UTC in seconds.
fn offset(text: &str) -> Option<i64> {
    if text == "Z" || text == "z" {
        return Some(0);
    }
    let sign = match text.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits: String = text[1..].chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let h: i64 = digits[..2].parse().ok()?;
    let m: i64 = digits[2..].parse().ok()?;
    Some(sign * (h * 3600 + m * 60))
}

fn rfc3339(s: &str) -> Option<f64> {
    let (date, rest) = s.split_at_checked(10)?;
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let mut parts = date.split('-');
    let y: i64 = parts.next()?.parse().ok()?;
    let mo: u32 = parts.next()?.parse().ok()?;
    let d: u32 = parts.next()?.parse().ok()?;
    let zone_at = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (clock, zone) = rest.split_at(zone_at);
    let off = if zone.is_empty() { 0 } else { offset(zone)? };
    let mut hms = clock.split(':');
    let h: u32 = hms.next()?.parse().ok()?;
    let mi: u32 = hms.next()?.parse().ok()?;
    let sec: f64 = hms.next()?.parse().ok()?;
    seconds(y, mo, d, h, mi, sec, off)
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn common_log(s: &str) -> Option<f64> {
    // 10/Oct/2026:13:55:36 +0000 (HAProxy writes 10/Oct/2026:13:55:36.120, without a zone: UTC is assumed)
    let (stamp, zone) = match s.split_once(' ') {
        Some((a, z)) => (a, offset(z.trim())?),
        None => (s, 0),
    };
    let mut parts = stamp.splitn(3, '/');
    let d: u32 = parts.next()?.parse().ok()?;
    let month = parts.next()?;
    let mo = MONTHS.iter().position(|m| *m == month)? as u32 + 1;
    let rest = parts.next()?;
    let mut hms = rest.split(':');
    let y: i64 = hms.next()?.parse().ok()?;
    let h: u32 = hms.next()?.parse().ok()?;
    let mi: u32 = hms.next()?.parse().ok()?;
    let sec: f64 = hms.next()?.parse().ok()?;
    seconds(y, mo, d, h, mi, sec, zone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_time_shapes_read_the_same_instant() {
        // 2026-10-10T13:55:36Z
        let unix = 1_791_640_536.0;
        assert_eq!(parse_time("2026-10-10T13:55:36Z").unwrap(), unix);
        assert_eq!(parse_time("[10/Oct/2026:13:55:36 +0000]").unwrap(), unix);
        assert_eq!(parse_time("10/Oct/2026:15:55:36 +0200").unwrap(), unix);
        assert_eq!(parse_time("2026-10-10T15:55:36+02:00").unwrap(), unix);
        assert_eq!(parse_time("1791640536.250").unwrap(), unix + 0.25);
        assert!((parse_time("2026-10-10T13:55:36.120Z").unwrap() - (unix + 0.12)).abs() < 1e-6);
        assert!((parse_time("10/Oct/2026:13:55:36.120").unwrap() - (unix + 0.12)).abs() < 1e-6);
    }

    #[test]
    fn a_bad_time_says_what_is_accepted() {
        assert!(parse_time("yesterday").unwrap_err().contains("RFC 3339"));
        assert!(parse_time("2026-13-10T13:55:36Z").is_err());
        assert!(parse_time("10/Foo/2026:13:55:36 +0000").is_err());
        assert!(parse_time("").is_err());
    }

    #[test]
    fn durations_are_seconds_unless_a_unit_is_given() {
        assert_eq!(parse_duration("0.120").unwrap(), Some(0.12));
        assert_eq!(parse_duration("120ms").unwrap(), Some(0.12));
        assert_eq!(parse_duration("-").unwrap(), None);
        assert!(parse_duration("fast").is_err());
    }
}
