//! Kubernetes resource quantities (`500m`, `2`, `512Mi`, `10Gi`), parsed at the edge so that a typo fails here
//! with exit 2 instead of at `kubectl apply`. Not the whole Kubernetes grammar: the exponent form (`1e3`) and
//! signs are left out, as nobody writes a CPU request that way.

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

/// The suffixes a quantity may carry, with the factor each stands for.
const SUFFIXES: &[(&str, f64)] = &[
    ("Ki", 1024.0),
    ("Mi", 1024.0 * 1024.0),
    ("Gi", 1024.0 * 1024.0 * 1024.0),
    ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
    ("Pi", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
    ("Ei", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
    ("m", 1e-3),
    ("k", 1e3),
    ("M", 1e6),
    ("G", 1e9),
    ("T", 1e12),
    ("P", 1e15),
    ("E", 1e18),
    ("", 1.0),
];

/// A resource quantity as Kubernetes writes it, kept as written and above zero: CPUs (`500m`, `2`) or bytes
/// (`512Mi`, `10Gi`).
#[derive(Debug, Clone, PartialEq)]
pub struct Quantity {
    written: String,
    value: f64,
}

impl Quantity {
    /// The amount in base units (CPUs or bytes), to compare a limit with its request.
    pub fn value(&self) -> f64 {
        self.value
    }
}

impl FromStr for Quantity {
    type Err = String;

    fn from_str(s: &str) -> Result<Quantity, String> {
        let accepted = "write a number with an optional suffix, e.g. 500m or 2 (CPUs), 512Mi or 10Gi (bytes); \
                        suffixes: m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei";
        let digits = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (number, suffix) = s.split_at(digits);
        let factor = SUFFIXES
            .iter()
            .find(|(name, _)| *name == suffix)
            .map(|(_, f)| *f)
            .ok_or_else(|| format!("{s:?} is not a quantity: {accepted}"))?;
        let well_formed = !number.is_empty()
            && number.matches('.').count() <= 1
            && !number.starts_with('.')
            && !number.ends_with('.');
        let n: f64 = match number.parse() {
            Ok(n) if well_formed => n,
            _ => return Err(format!("{s:?} is not a quantity: {accepted}")),
        };
        if n <= 0.0 {
            return Err(format!("{s:?} is not above zero"));
        }
        Ok(Quantity {
            written: s.to_string(),
            value: n * factor,
        })
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

impl Serialize for Quantity {
    /// As a string, always: `"2"` and `2` are the same quantity to the API server, and a string is never
    /// mistaken for a float.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> f64 {
        s.parse::<Quantity>().unwrap().value()
    }

    #[test]
    fn cpus_and_bytes_read_with_their_suffixes() {
        assert_eq!(q("2"), 2.0);
        assert_eq!(q("500m"), 0.5);
        assert_eq!(q("1.5"), 1.5);
        assert_eq!(q("512Mi"), 512.0 * 1024.0 * 1024.0);
        assert_eq!(q("1G"), 1e9);
        assert_eq!("10Gi".parse::<Quantity>().unwrap().to_string(), "10Gi");
    }

    #[test]
    fn anything_else_is_refused_with_what_is_accepted() {
        for bad in [
            "", "Mi", "1 Gi", "1GB", "1gi", "-1", "1.", ".5", "1.2.3", "1e3", "0", "0m",
        ] {
            let e = bad.parse::<Quantity>().unwrap_err();
            assert!(
                e.contains("is not a quantity") || e.contains("not above zero"),
                "{bad:?}: {e}"
            );
        }
        let e = "1GB".parse::<Quantity>().unwrap_err();
        assert!(e.contains("512Mi"), "{e}");
    }
}
