//! Handshake faults: what a TLS listener does to a connection before any HTTP is spoken.
//!
//! For: the parameters of each handshake fault as a scenario writes them (`tls: { faults: { expired: 20% } }`, or
//! a phase's `tls: { ... }`), their validation, and [`decide`], the pure function that turns the faults in force
//! and one connection's seeded draws into what that connection gets. Not for: certificates or sockets (see
//! `acceptor`), or counting (see `record`).
//!
//! The faults act per connection, not per call, so they have their own small list instead of a place in
//! `behaviours::fault_list!`: [`HandshakeFaults::slots`] is the only place that knows every fault that takes a
//! share, and its order is the order of the draw. Shares, phases and ramps work as they do for the call faults:
//! a phase's `tls:` is laid over the base field by field, shares add up to at most 100%, and during a ramp every
//! share and the delay's quantile move linearly from the previous phase's value.

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::behaviours::{Fault, Latency, LatencyModel};
use crate::draw::{pick_share, ramp_delay, CallDraws};
use crate::invalid::Invalid;

/// The handshake faults of a TLS listener. Every field is optional; a phase's faults replace the base's field by
/// field, so `{expired: 0%}` ends only the expired certificates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandshakeFaults {
    /// The delay between the client's hello and faultd's answer, as a latency distribution (`{fixed: 2s}`,
    /// `{p50: 50ms, p99: 1s}`): what a CPU-starved TLS terminator does to its callers' connect time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<Latency>,
    /// The share of handshakes refused with a fatal alert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<HandshakeFailure>,
    /// The share of handshakes offered a certificate that expired (signed by the run's CA, right names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired: Option<Share>,
    /// The share of handshakes offered a certificate for another name (`wrong.invalid`, signed by the run's CA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrong_name: Option<Share>,
    /// The share of handshakes offered a certificate from an issuer the caller does not trust (right names,
    /// valid dates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untrusted: Option<Share>,
    /// The share of connections dropped without close_notify once the handshake is done and the request has
    /// arrived: a truncation attack, or a terminator that crashed mid-stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate: Option<Share>,
}

/// `failure: { share: 10%, alert: handshake_failure }`: that share of handshakes ends in a fatal alert right
/// after the client's hello.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandshakeFailure {
    /// The share of handshakes refused.
    pub share: Share,
    /// The alert sent, by its name in RFC 8446 (`handshake_failure` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<String>,
}

/// The fatal alerts a handshake can be refused with, by their RFC 8446 names.
pub const ALERTS: &[(&str, u8)] = &[
    ("handshake_failure", 40),
    ("bad_certificate", 42),
    ("unsupported_certificate", 43),
    ("certificate_revoked", 44),
    ("certificate_expired", 45),
    ("certificate_unknown", 46),
    ("illegal_parameter", 47),
    ("unknown_ca", 48),
    ("access_denied", 49),
    ("decode_error", 50),
    ("decrypt_error", 51),
    ("protocol_version", 70),
    ("insufficient_security", 71),
    ("internal_error", 80),
    ("unrecognized_name", 112),
    ("no_application_protocol", 120),
];

impl HandshakeFailure {
    /// The alert's code.
    pub fn alert_code(&self) -> Result<u8, Invalid> {
        let name = self.alert.as_deref().unwrap_or("handshake_failure");
        ALERTS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
            .ok_or_else(|| {
                let known: Vec<&str> = ALERTS.iter().map(|(n, _)| *n).collect();
                Invalid::new(
                    "alert",
                    format!(
                        "{name:?} is not an alert faultd sends ({})",
                        known.join(", ")
                    ),
                )
            })
    }
}

/// What one connection gets, after the delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeAction {
    /// The listener's own certificate, and HTTP after it.
    Serve,
    /// A fatal alert with this code instead of the server's hello.
    Alert(u8),
    /// An expired certificate.
    Expired,
    /// A certificate for another name.
    WrongName,
    /// A certificate from an untrusted issuer.
    Untrusted,
    /// The handshake completes; the connection is dropped without close_notify once the request arrives.
    Truncate,
}

impl HandshakeAction {
    /// Whether this action serves a certificate only the run's CA can mint.
    pub fn needs_minted_certificate(self) -> bool {
        matches!(
            self,
            HandshakeAction::Expired | HandshakeAction::WrongName | HandshakeAction::Untrusted
        )
    }
}

/// The decision for one connection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HandshakeDecision {
    /// How long the answer to the client's hello waits.
    pub delay: Duration,
    /// What the connection gets.
    pub action: HandshakeAction,
}

impl HandshakeFaults {
    /// The faults that take a share, in draw order: the one list of them.
    pub fn slots(&self) -> [(&'static str, Option<Share>, HandshakeAction); 5] {
        [
            (
                "failure",
                self.failure.as_ref().map(|f| f.share),
                HandshakeAction::Alert(
                    self.failure
                        .as_ref()
                        .and_then(|f| f.alert_code().ok())
                        .unwrap_or(40),
                ),
            ),
            ("expired", self.expired, HandshakeAction::Expired),
            ("wrong_name", self.wrong_name, HandshakeAction::WrongName),
            ("untrusted", self.untrusted, HandshakeAction::Untrusted),
            ("truncate", self.truncate, HandshakeAction::Truncate),
        ]
    }

    /// These faults laid over `base`: each field set here wins.
    pub fn over(&self, base: &HandshakeFaults) -> HandshakeFaults {
        HandshakeFaults {
            delay: self.delay.clone().or_else(|| base.delay.clone()),
            failure: self.failure.clone().or_else(|| base.failure.clone()),
            expired: self.expired.or(base.expired),
            wrong_name: self.wrong_name.or(base.wrong_name),
            untrusted: self.untrusted.or(base.untrusted),
            truncate: self.truncate.or(base.truncate),
        }
    }

    /// Whether any fault here serves a certificate only the run's CA can mint (expired, wrong name,
    /// untrusted), with a share above 0.
    pub fn needs_minted_certificates(&self) -> Option<&'static str> {
        self.slots()
            .into_iter()
            .find(|(_, share, action)| {
                action.needs_minted_certificate() && share.is_some_and(|s| s.fraction() > 0.0)
            })
            .map(|(name, _, _)| name)
    }

    /// Checks every parameter and that the shares add up to at most 100%. Fields are named relative to the
    /// faults (`delay.p99`, `failure.alert`).
    pub fn validate(&self) -> Result<(), Invalid> {
        if let Some(delay) = &self.delay {
            Fault::validate(delay).map_err(|e| e.at("delay"))?;
        }
        if let Some(failure) = &self.failure {
            failure.alert_code().map_err(|e| e.at("failure"))?;
        }
        let slots = self.slots();
        crate::invalid::check_shares(slots.iter().map(|(n, s, _)| (*n, s.map(Share::fraction))))
    }

    /// Multiplies the delay by `factor` (`--time-scale`); shares are unchanged.
    pub fn scale_time(&mut self, factor: f64) {
        if let Some(delay) = &mut self.delay {
            Fault::scale_time(delay, factor);
        }
    }
}

/// Handshake faults made ready for the accept path: validated, the delay's model built once.
#[derive(Debug)]
pub struct CompiledHandshake {
    /// The faults as configured (already laid over the base).
    pub faults: HandshakeFaults,
    delay: Option<LatencyModel>,
}

impl CompiledHandshake {
    /// Validates and prepares `faults`.
    pub fn compile(faults: &HandshakeFaults) -> Result<CompiledHandshake, Invalid> {
        faults.validate()?;
        let delay = faults
            .delay
            .as_ref()
            .map(Latency::model)
            .transpose()
            .map_err(|e| e.at("delay"))?;
        Ok(CompiledHandshake {
            faults: faults.clone(),
            delay,
        })
    }

    fn delay(&self, u: f64) -> f64 {
        self.delay
            .as_ref()
            .map_or(0.0, |m| m.quantile(u).as_secs_f64())
    }
}

/// Decides what one connection gets. `to` is in force; during a ramp `from` is the previous phase's and `weight`
/// (0..=1) how far the ramp has gone. The draw walks [`HandshakeFaults::slots`] in order, each share blended
/// along the ramp; past them all the connection is served.
pub fn decide(
    from: Option<&CompiledHandshake>,
    to: &CompiledHandshake,
    weight: f64,
    draws: CallDraws,
) -> HandshakeDecision {
    let w = if from.is_some() {
        weight.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let delay = ramp_delay(
        from.map(|f| f.delay(draws.latency)),
        to.delay(draws.latency),
        w,
    );
    let later = to.faults.slots();
    let earlier = from.map(|f| f.faults.slots());
    let shares = |slots: &[(&str, Option<Share>, HandshakeAction)]| -> Vec<f64> {
        slots
            .iter()
            .map(|(_, s, _)| s.map_or(0.0, Share::fraction))
            .collect()
    };
    let from_shares = earlier.as_ref().map(|e| shares(e));
    let action = match pick_share(from_shares.as_deref(), &shares(&later), w, draws.fault) {
        // A fault fading out keeps its own alert code if the later phase has none.
        Some(i) => match (later[i].2, earlier.as_ref()) {
            (HandshakeAction::Alert(_), Some(e)) if to.faults.failure.is_none() => e[i].2,
            (act, _) => act,
        },
        None => HandshakeAction::Serve,
    };
    HandshakeDecision {
        delay: Duration::from_secs_f64(delay.max(0.0)),
        action,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(yaml: &str) -> CompiledHandshake {
        let f: HandshakeFaults = serde_saphyr::from_str(yaml).unwrap();
        CompiledHandshake::compile(&f).unwrap()
    }

    fn tally(
        from: Option<&CompiledHandshake>,
        to: &CompiledHandshake,
        w: f64,
    ) -> std::collections::BTreeMap<String, u64> {
        let mut counts = std::collections::BTreeMap::new();
        for n in 0..100_000 {
            let d = decide(from, to, w, CallDraws::new(5, 11, n));
            *counts.entry(format!("{:?}", d.action)).or_insert(0) += 1;
        }
        counts
    }

    fn assert_share(counts: &std::collections::BTreeMap<String, u64>, key: &str, p: f64) {
        let got = *counts.get(key).unwrap_or(&0) as f64 / 100_000.0;
        let tolerance = 5.0 * (p * (1.0 - p) / 100_000.0).sqrt() + 1e-9;
        assert!(
            (got - p).abs() <= tolerance,
            "{key}: {got}, expected {p} in {counts:?}"
        );
    }

    #[test]
    fn each_handshake_fault_takes_its_share_and_the_rest_is_served() {
        let f = compiled(
            "{failure: {share: 10%, alert: unknown_ca}, expired: 10%, wrong_name: 10%, untrusted: 10%, \
             truncate: 10%}",
        );
        let counts = tally(None, &f, 1.0);
        assert_share(&counts, "Alert(48)", 0.10);
        assert_share(&counts, "Expired", 0.10);
        assert_share(&counts, "WrongName", 0.10);
        assert_share(&counts, "Untrusted", 0.10);
        assert_share(&counts, "Truncate", 0.10);
        assert_share(&counts, "Serve", 0.50);
    }

    #[test]
    fn a_ramp_blends_the_shares_and_the_delay_linearly() {
        let from = compiled("{delay: {fixed: 0s}}");
        let to = compiled("{delay: {fixed: 2s}, expired: 60%}");
        assert_share(&tally(Some(&from), &to, 0.5), "Expired", 0.30);
        let d = decide(Some(&from), &to, 0.25, CallDraws::new(1, 1, 0));
        assert_eq!(d.delay, Duration::from_millis(500));
    }

    #[test]
    fn shares_over_one_hundred_percent_and_unknown_alerts_are_refused() {
        let f: HandshakeFaults = serde_saphyr::from_str("{expired: 70%, truncate: 40%}").unwrap();
        let e = f.validate().unwrap_err();
        assert!(e.message.contains("over 100%"), "{}", e.message);
        let f: HandshakeFaults =
            serde_saphyr::from_str("{failure: {share: 1%, alert: nope}}").unwrap();
        let e = f.validate().unwrap_err();
        assert_eq!(e.field, "failure.alert");
        assert!(e.message.contains("unknown_ca"), "{}", e.message);
    }

    #[test]
    fn a_phase_replaces_the_fields_it_sets_and_keeps_the_rest() {
        let base: HandshakeFaults =
            serde_saphyr::from_str("{delay: {fixed: 10ms}, expired: 5%}").unwrap();
        let phase: HandshakeFaults = serde_saphyr::from_str("{expired: 0%}").unwrap();
        let merged = phase.over(&base);
        assert_eq!(merged.delay, base.delay);
        assert_eq!(merged.expired, Some(Share::from_fraction(0.0)));
    }
}
