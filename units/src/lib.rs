//! Typed quantities for faultline's configuration: durations, rates, shares and byte sizes, parsed at the edge
//! from the strings people write in scenarios and on command lines ("250ms", "500/s", "30%", "4KiB").
//!
//! Not for arithmetic on the hot path: each type converts to a plain `std::time::Duration` or `f64` once, where it
//! enters a component. What this crate guarantees is that no number of unknown unit ever crosses a boundary:
//! a bare `250` is refused with a message that says which units are accepted.
//!
//! Also the one way a file that a configuration names is read ([`read_named_file`]): a regular file of bounded size.

use std::fmt;
use std::str::FromStr;

mod grpc;
pub mod hosts;
pub mod input;
pub mod port;
pub mod trace;
pub mod yaml_index;
pub use grpc::{decode_hex, GrpcCode, GrpcCodeError};

use serde::de::{self, Deserializer, Visitor};
use serde::{Serialize, Serializer};

/// Why a quantity could not be parsed. The message is meant for a person: it quotes the input and shows an
/// example of what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("{input:?} is not a duration: {why} (write it like 250ms, 2s, 1m30s; units: ns, us, ms, s, m, h)")]
    Duration { input: String, why: &'static str },
    #[error(
        "{input:?} is not a rate: {why} (write it like 500/s, 6/min, 0.1/s; units: /s, /min, /h)"
    )]
    Rate { input: String, why: &'static str },
    #[error("{input:?} is not a share: {why} (write it like 30%, 0.5%, 100%)")]
    Share { input: String, why: &'static str },
    #[error("{input:?} is not a size: {why} (write it like 512B, 4KiB, 1MiB, 10kB)")]
    Size { input: String, why: &'static str },
    #[error("{input:?} is not a factor from 0.001 to 1000: {why} (write it like 0.2, 1, 10)")]
    Scale { input: String, why: &'static str },
}

/// Splits "12.5ms" into (12.5, "ms"). The number must be plain decimal: no sign, no exponent, no spaces.
fn split_number(s: &str) -> Option<(f64, &str)> {
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    let number: f64 = s[..end].parse().ok()?;
    number.is_finite().then_some((number, &s[end..]))
}

// ---------------------------------------------------------------------------------------------------------------
// Duration

/// A non-negative duration written with its unit: `250ms`, `2s`, `1.5s`, `1m30s`, `100us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Dur(pub std::time::Duration);

impl Dur {
    pub const ZERO: Dur = Dur(std::time::Duration::ZERO);

    pub fn from_millis(ms: u64) -> Self {
        Dur(std::time::Duration::from_millis(ms))
    }

    pub fn from_secs_f64(s: f64) -> Self {
        Dur(std::time::Duration::from_secs_f64(s.max(0.0)))
    }

    pub fn get(self) -> std::time::Duration {
        self.0
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0.as_secs_f64()
    }

    /// This duration multiplied by `factor` (used by `--time-scale`).
    pub fn scaled(self, factor: f64) -> Self {
        Dur(self.0.mul_f64(factor.max(0.0)))
    }
}

impl From<std::time::Duration> for Dur {
    fn from(d: std::time::Duration) -> Self {
        Dur(d)
    }
}

impl From<Dur> for std::time::Duration {
    fn from(d: Dur) -> Self {
        d.0
    }
}

impl FromStr for Dur {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, UnitError> {
        let err = |why| UnitError::Duration {
            input: input.to_string(),
            why,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("it is empty"));
        }
        if s.starts_with('-') {
            return Err(err("durations cannot be negative"));
        }
        if s.contains(char::is_whitespace) {
            return Err(err("it contains a space"));
        }
        let mut rest = s;
        let mut total = 0.0_f64;
        while !rest.is_empty() {
            let (number, tail) = split_number(rest).ok_or_else(|| err("expected a number"))?;
            let unit_len = tail
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(tail.len());
            let (unit, next) = tail.split_at(unit_len);
            let seconds_per_unit = match unit {
                "ns" => 1e-9,
                "us" | "µs" => 1e-6,
                "ms" => 1e-3,
                "s" => 1.0,
                "m" | "min" => 60.0,
                "h" => 3600.0,
                "" => return Err(err("a duration needs a unit")),
                _ => return Err(err("unknown unit")),
            };
            total += number * seconds_per_unit;
            rest = next;
        }
        if !total.is_finite() || total > 1e9 {
            return Err(err("it is too large"));
        }
        Ok(Dur(std::time::Duration::from_secs_f64(total)))
    }
}

impl fmt::Display for Dur {
    /// Prints the shortest exact form in one unit: `250ms`, `2s`, `1.5s`, `90s`, `100us`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            write!(f, "0s")
        } else if nanos.is_multiple_of(1_000_000_000) {
            write!(f, "{}s", nanos / 1_000_000_000)
        } else if nanos.is_multiple_of(1_000_000) {
            let ms = nanos / 1_000_000;
            if ms >= 1000 {
                write!(f, "{}s", ms as f64 / 1000.0)
            } else {
                write!(f, "{ms}ms")
            }
        } else if nanos.is_multiple_of(1_000) {
            write!(f, "{}us", nanos / 1_000)
        } else {
            write!(f, "{nanos}ns")
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Rate

/// An arrival or call rate: `500/s`, `6/min`, `0.1/s`, `3600/h`. Stored as events per second.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Rate(f64);

impl Rate {
    pub fn per_second(per_second: f64) -> Self {
        Rate(per_second.max(0.0))
    }

    pub fn per_sec(self) -> f64 {
        self.0
    }

    /// The gap between two events at this rate, or `None` for a zero rate.
    pub fn interval(self) -> Option<std::time::Duration> {
        (self.0 > 0.0).then(|| std::time::Duration::from_secs_f64(1.0 / self.0))
    }

    /// This rate with the time axis scaled by `factor`: a scenario compressed to a tenth of its length keeps its
    /// rate, so this is the identity for rates; callers that want fewer requests change the rate explicitly.
    pub fn times(self, factor: f64) -> Self {
        Rate(self.0 * factor.max(0.0))
    }
}

impl FromStr for Rate {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, UnitError> {
        let err = |why| UnitError::Rate {
            input: input.to_string(),
            why,
        };
        let s = input.trim();
        if s.starts_with('-') {
            return Err(err("rates cannot be negative"));
        }
        let (number, unit) = s
            .split_once('/')
            .ok_or_else(|| err("a rate needs a unit such as /s"))?;
        let (value, tail) = split_number(number.trim()).ok_or_else(|| err("expected a number"))?;
        if !tail.is_empty() {
            return Err(err("expected a number before the /"));
        }
        let seconds = match unit.trim() {
            "s" | "sec" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            _ => return Err(err("unknown unit")),
        };
        Ok(Rate(value / seconds))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 1.0 || self.0 == 0.0 {
            write!(f, "{}/s", trim_float(self.0))
        } else {
            write!(f, "{}/min", trim_float(self.0 * 60.0))
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Share

/// A share of requests between 0% and 100%: `30%`, `0.5%`. Stored as a fraction in `0.0..=1.0`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Share(f64);

impl Share {
    pub const ZERO: Share = Share(0.0);
    pub const ALL: Share = Share(1.0);

    /// A share from a fraction, clamped into `0.0..=1.0`.
    pub fn from_fraction(f: f64) -> Self {
        Share(if f.is_nan() { 0.0 } else { f.clamp(0.0, 1.0) })
    }

    pub fn fraction(self) -> f64 {
        self.0
    }

    pub fn percent(self) -> f64 {
        self.0 * 100.0
    }
}

impl FromStr for Share {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, UnitError> {
        let err = |why| UnitError::Share {
            input: input.to_string(),
            why,
        };
        let s = input.trim();
        if s.starts_with('-') {
            return Err(err("shares cannot be negative"));
        }
        let number = s
            .strip_suffix('%')
            .ok_or_else(|| err("a share needs a % sign"))?;
        let (value, tail) = split_number(number.trim()).ok_or_else(|| err("expected a number"))?;
        if !tail.is_empty() {
            return Err(err("expected a number before the %"));
        }
        if value > 100.0 {
            return Err(err("a share cannot be over 100%"));
        }
        Ok(Share(value / 100.0))
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", trim_float(self.0 * 100.0))
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Size

/// A number of bytes: `512B`, `4KiB`, `1MiB`, `10kB`, `2MB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Size(pub u64);

impl Size {
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for Size {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, UnitError> {
        let err = |why| UnitError::Size {
            input: input.to_string(),
            why,
        };
        let s = input.trim();
        if s.starts_with('-') {
            return Err(err("sizes cannot be negative"));
        }
        let (value, unit) = split_number(s).ok_or_else(|| err("expected a number"))?;
        let factor = match unit.trim() {
            "B" | "b" => 1.0,
            "kB" | "KB" => 1e3,
            "KiB" => 1024.0,
            "MB" => 1e6,
            "MiB" => 1024.0 * 1024.0,
            "GB" => 1e9,
            "GiB" => 1024.0 * 1024.0 * 1024.0,
            "" => return Err(err("a size needs a unit")),
            _ => return Err(err("unknown unit")),
        };
        let bytes = value * factor;
        if bytes > 1e15 {
            return Err(err("it is too large"));
        }
        Ok(Size(bytes.round() as u64))
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
            write!(f, "{}MiB", b >> 20)
        } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
            write!(f, "{}KiB", b >> 10)
        } else {
            write!(f, "{b}B")
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Scale

/// A factor every duration or rate of a run is multiplied by (`--time-scale`, `--speed`, `--scale-rate`): a plain
/// number from [`Scale::MIN`] to [`Scale::MAX`]. The bounds keep every scaled duration representable (the longest a
/// duration may be written, times the largest factor, is far below what `Duration` holds) and every scaled rate
/// finite; past them a run would last centuries or fit its whole load into a nanosecond.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Scale(f64);

impl Scale {
    pub const MIN: f64 = 1e-3;
    pub const MAX: f64 = 1e3;
    pub const ONE: Scale = Scale(1.0);

    pub fn get(self) -> f64 {
        self.0
    }
}

impl FromStr for Scale {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, UnitError> {
        let err = |why| UnitError::Scale {
            input: input.to_string(),
            why,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("it is empty"));
        }
        let factor: f64 = s.parse().map_err(|_| err("it is not a number"))?;
        Scale::try_from(factor).map_err(|e| match e {
            UnitError::Scale { why, .. } => err(why),
            other => other,
        })
    }
}

impl TryFrom<f64> for Scale {
    type Error = UnitError;

    fn try_from(factor: f64) -> Result<Self, UnitError> {
        let err = |why| UnitError::Scale {
            input: factor.to_string(),
            why,
        };
        if !factor.is_finite() {
            return Err(err("it is not a finite number"));
        }
        if factor <= 0.0 {
            return Err(err("it must be above 0"));
        }
        if !(Scale::MIN..=Scale::MAX).contains(&factor) {
            return Err(err("it is out of range"));
        }
        Ok(Scale(factor))
    }
}

impl fmt::Display for Scale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

// ---------------------------------------------------------------------------------------------------------------
// serde and schemars: every type reads from a string, and a bare number is refused with the type's own message.

macro_rules! string_quantity {
    ($ty:ty, $what:literal, $example:literal, $pattern:literal) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        write!(f, "{} written as a string such as {}", $what, $example)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$ty, E> {
                        v.to_string().parse().map_err(E::custom)
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$ty, E> {
                        v.to_string().parse().map_err(E::custom)
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<$ty, E> {
                        v.to_string().parse().map_err(E::custom)
                    }
                }
                d.deserialize_any(V)
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl schemars::JsonSchema for $ty {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($ty).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "description": concat!($what, ", e.g. ", $example),
                    "pattern": $pattern,
                })
            }
        }
    };
}

string_quantity!(
    Dur,
    "a duration",
    "\"250ms\"",
    r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|min|h))+$"
);
string_quantity!(
    Rate,
    "a rate",
    "\"500/s\"",
    r"^[0-9]+(\.[0-9]+)?/(s|sec|m|min|h)$"
);
string_quantity!(Share, "a share", "\"30%\"", r"^[0-9]+(\.[0-9]+)?%$");
string_quantity!(
    Size,
    "a size",
    "\"4KiB\"",
    r"^[0-9]+(\.[0-9]+)?(B|b|kB|KB|KiB|MB|MiB|GB|GiB)$"
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_parse_with_their_units() {
        assert_eq!(
            "250ms".parse::<Dur>().unwrap().get(),
            Duration::from_millis(250)
        );
        assert_eq!("2s".parse::<Dur>().unwrap().get(), Duration::from_secs(2));
        assert_eq!(
            "1.5s".parse::<Dur>().unwrap().get(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            "1m30s".parse::<Dur>().unwrap().get(),
            Duration::from_secs(90)
        );
        assert_eq!(
            "100us".parse::<Dur>().unwrap().get(),
            Duration::from_micros(100)
        );
        assert_eq!("0s".parse::<Dur>().unwrap().get(), Duration::ZERO);
        assert_eq!(
            "2h".parse::<Dur>().unwrap().get(),
            Duration::from_secs(7200)
        );
    }

    #[test]
    fn durations_without_units_or_with_spaces_or_signs_are_refused() {
        for bad in ["", "250", "5 sec", "-1s", "2 s", "1x", "ms", "1.2.3s", "s5"] {
            let e = bad.parse::<Dur>().unwrap_err();
            assert!(e.to_string().contains("is not a duration"), "{bad}: {e}");
        }
        assert!("-1s"
            .parse::<Dur>()
            .unwrap_err()
            .to_string()
            .contains("negative"));
        assert!("250"
            .parse::<Dur>()
            .unwrap_err()
            .to_string()
            .contains("needs a unit"));
    }

    #[test]
    fn durations_print_back_to_what_parses() {
        for s in ["250ms", "2s", "1.5s", "90s", "100us", "7ns", "0s"] {
            let d: Dur = s.parse().unwrap();
            assert_eq!(d.to_string().parse::<Dur>().unwrap(), d, "{s}");
        }
        assert_eq!(Dur::from_millis(250).to_string(), "250ms");
        assert_eq!(Dur::from_millis(1500).to_string(), "1.5s");
    }

    #[test]
    fn rates_are_events_per_second() {
        assert_eq!("500/s".parse::<Rate>().unwrap().per_sec(), 500.0);
        assert_eq!("6/min".parse::<Rate>().unwrap().per_sec(), 0.1);
        assert_eq!("0.1/s".parse::<Rate>().unwrap().per_sec(), 0.1);
        assert_eq!("3600/h".parse::<Rate>().unwrap().per_sec(), 1.0);
        assert_eq!(
            "500/s".parse::<Rate>().unwrap().interval(),
            Some(Duration::from_millis(2))
        );
        for bad in ["500", "-5/s", "5/day", "/s", "fast/s"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn shares_are_percentages_up_to_one_hundred() {
        assert_eq!("30%".parse::<Share>().unwrap().fraction(), 0.3);
        assert_eq!("100%".parse::<Share>().unwrap().fraction(), 1.0);
        assert_eq!("0.5%".parse::<Share>().unwrap().fraction(), 0.005);
        assert!("101%"
            .parse::<Share>()
            .unwrap_err()
            .to_string()
            .contains("over 100%"));
        assert!("30"
            .parse::<Share>()
            .unwrap_err()
            .to_string()
            .contains("% sign"));
        assert!("-5%".parse::<Share>().is_err());
        assert_eq!(Share::from_fraction(0.3).to_string(), "30%");
    }

    #[test]
    fn sizes_accept_decimal_and_binary_units() {
        assert_eq!("512B".parse::<Size>().unwrap().bytes(), 512);
        assert_eq!("4KiB".parse::<Size>().unwrap().bytes(), 4096);
        assert_eq!("10kB".parse::<Size>().unwrap().bytes(), 10_000);
        assert_eq!("1MiB".parse::<Size>().unwrap().bytes(), 1 << 20);
        assert!("12".parse::<Size>().is_err());
        assert_eq!(Size(4096).to_string(), "4KiB");
        assert_eq!("0.2".parse::<Scale>().unwrap().get(), 0.2);
        for bad in ["", "0", "-1", "NaN", "inf", "1e300", "1e-300", "x"] {
            assert!(bad.parse::<Scale>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn serde_reads_strings_and_refuses_bare_numbers_with_the_unit_message() {
        let d: Dur = serde_json::from_str("\"250ms\"").unwrap();
        assert_eq!(d, Dur::from_millis(250));
        let e = serde_json::from_str::<Dur>("250").unwrap_err().to_string();
        assert!(e.contains("needs a unit"), "{e}");
        let r: Rate = serde_json::from_str("\"500/s\"").unwrap();
        assert_eq!(serde_json::to_string(&r).unwrap(), "\"500/s\"");
    }
}
