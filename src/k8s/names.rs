//! The names of a cluster run's objects: one instance name (`NAME`), from which every object is named
//! (`NAME-scenario`, `NAME-reports`, `NAME-runner`, `NAME-agents`) and labelled. Not for the objects themselves
//! (`objects`) nor for what they hold (`manifests`).
//!
//! Kubernetes is strict about names: a Service name is a DNS-1035 label (lowercase letters, digits and `-`,
//! starting with a letter, ending with a letter or digit, at most 63 characters), and an Indexed Job's pods take the
//! hostname `JOB-INDEX`, which must be a DNS label too. An instance name that passes here keeps all of them valid.

use std::fmt;

/// The longest a DNS label may be.
const DNS_LABEL_MAX: usize = 63;

/// What an instance name is as a rule, for error messages.
const RULE: &str =
    "lowercase letters, digits and `-`, starting with a letter and ending with a letter or digit";

/// The name every object of one cluster run derives from, e.g. `slow-dependency`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceName(String);

/// Why a name given on the command line (`--name`, `--namespace`) cannot name Kubernetes objects.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {given:?} is not a valid name: {why}")]
pub struct NameError {
    /// The flag that gave the name.
    pub flag: &'static str,
    /// The name as given.
    pub given: String,
    /// What is wrong, with what is accepted.
    pub why: String,
}

impl InstanceName {
    /// The longest instance name: the agents' pods are named `NAME-agents-INDEX` with an index of up to three
    /// digits (`MAX_AGENTS` is 1000), and that hostname must stay a 63-character DNS label.
    pub const MAX_LEN: usize = DNS_LABEL_MAX - "-agents-999".len();

    /// Derives an instance name from a scenario's name: lowercased, every run of other characters turned into one
    /// `-`, trimmed, cut to [`Self::MAX_LEN`], and prefixed with `faultline-` if it would not start with a letter
    /// (`2024 Outage (EU)` becomes `faultline-2024-outage-eu`).
    pub fn from_scenario(name: &str) -> InstanceName {
        let mut out = String::with_capacity(name.len());
        for c in name.chars() {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                out.push(c);
            } else if !out.is_empty() && !out.ends_with('-') {
                out.push('-');
            }
        }
        if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.insert_str(
                0,
                if out.is_empty() {
                    "faultline"
                } else {
                    "faultline-"
                },
            );
        }
        out.truncate(Self::MAX_LEN);
        let trimmed = out.trim_end_matches('-').len();
        out.truncate(trimmed);
        InstanceName(out)
    }

    /// Takes a name given with `--name` as it is, or says why Kubernetes would refuse it (and what
    /// [`Self::from_scenario`] would make of it).
    pub fn parse(given: &str) -> Result<InstanceName, NameError> {
        check_label(given, Self::MAX_LEN, true).map_err(|why| NameError {
            flag: "--name",
            given: given.to_string(),
            why: format!("{why}; for example {}", InstanceName::from_scenario(given)),
        })?;
        Ok(InstanceName(given.to_string()))
    }

    /// The name of the object of one part of the run, e.g. `slow-dependency-runner`.
    pub fn object(&self, part: &str) -> String {
        format!("{}-{part}", self.0)
    }

    /// The name itself.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for InstanceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks a namespace given with `--namespace`: a DNS-1123 label.
pub fn check_namespace(given: &str) -> Result<(), NameError> {
    check_label(given, DNS_LABEL_MAX, false).map_err(|why| NameError {
        flag: "--namespace",
        given: given.to_string(),
        why,
    })
}

/// Checks a DNS label of at most `max` characters; with `letter_first`, a DNS-1035 label (it starts with a letter).
fn check_label(s: &str, max: usize, letter_first: bool) -> Result<(), String> {
    let first_ok = |c: char| c.is_ascii_lowercase() || (!letter_first && c.is_ascii_digit());
    if s.is_empty() {
        return Err(format!("it is empty; use {RULE}"));
    }
    if s.len() > max {
        return Err(format!("it has {} characters; at most {max}", s.len()));
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        || !s.starts_with(first_ok)
        || s.ends_with('-')
    {
        return Err(format!(
            "use {}",
            if letter_first {
                RULE.to_string()
            } else {
                RULE.replace("starting with a letter", "starting with a letter or digit")
            }
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derived(s: &str) -> String {
        InstanceName::from_scenario(s).0
    }

    #[test]
    fn a_scenario_name_is_lowercased_and_each_run_of_other_characters_becomes_one_dash() {
        assert_eq!(derived("slow-dependency"), "slow-dependency");
        assert_eq!(derived("Payment Brownout"), "payment-brownout");
        assert_eq!(derived("db__brownout..v2"), "db-brownout-v2");
        assert_eq!(derived("--checkout (EU) --"), "checkout-eu");
        assert_eq!(derived("café_öl"), "caf-l");
    }

    #[test]
    fn a_name_that_would_not_start_with_a_letter_is_prefixed() {
        assert_eq!(derived("2024 Outage"), "faultline-2024-outage");
        assert_eq!(derived("!!!"), "faultline");
        assert_eq!(derived(""), "faultline");
    }

    #[test]
    fn a_long_name_is_cut_without_a_trailing_dash() {
        let long = format!(
            "{}-{}",
            "a".repeat(InstanceName::MAX_LEN - 1),
            "b".repeat(20)
        );
        let name = derived(&long);
        assert_eq!(name, "a".repeat(InstanceName::MAX_LEN - 1));
        assert!(name.len() <= InstanceName::MAX_LEN);
    }

    #[test]
    fn every_derived_name_passes_the_check_given_names_face() {
        for s in [
            "slow-dependency",
            "2024 Outage",
            "",
            "Ünïcode everywhere ✓",
            &"x-".repeat(60),
            "UPPER_case.name",
        ] {
            let name = derived(s);
            assert!(InstanceName::parse(&name).is_ok(), "{s:?} -> {name:?}");
        }
    }

    #[test]
    fn the_longest_name_keeps_every_object_and_agent_hostname_a_dns_label() {
        let name = InstanceName("a".repeat(InstanceName::MAX_LEN));
        for part in ["scenario", "reports", "runner", "agents"] {
            assert!(name.object(part).len() <= DNS_LABEL_MAX, "{part}");
        }
        // The highest index an Indexed Job of MAX_AGENTS pods gives.
        let hostname = format!("{}-{}", name.object("agents"), super::super::MAX_AGENTS - 1);
        assert!(hostname.len() <= DNS_LABEL_MAX, "{hostname}");
    }

    #[test]
    fn a_given_name_is_taken_as_it_is_or_refused_with_a_suggestion() {
        assert_eq!(
            InstanceName::parse("checkout-eu").unwrap().as_str(),
            "checkout-eu"
        );
        let e = InstanceName::parse("Checkout_EU").unwrap_err().to_string();
        assert!(e.contains("--name \"Checkout_EU\""), "{e}");
        assert!(e.contains("for example checkout-eu"), "{e}");
        for bad in [
            "",
            "1abc",
            "abc-",
            "a.b",
            &"a".repeat(InstanceName::MAX_LEN + 1),
        ] {
            assert!(InstanceName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_namespace_is_a_dns_label_that_may_start_with_a_digit() {
        assert!(check_namespace("shop").is_ok());
        assert!(check_namespace("1shop").is_ok());
        for bad in ["", "Shop", "shop-", "a.b", &"a".repeat(64)] {
            assert!(check_namespace(bad).is_err(), "{bad:?}");
        }
    }
}
