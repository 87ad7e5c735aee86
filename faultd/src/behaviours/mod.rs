//! Behaviours: what a route does to the calls it receives, one small type per fault, in the Toxiproxy manner.
//!
//! For: the parameters of each behaviour exactly as the scenario writes them (`latency`, `errors`, `hang`,
//! `reset`, `empty`, `malformed`, `slow_body`, `proxy`, `response`, `fail_first`), their validation, and
//! [`decide`], the pure function that turns a behaviour and a call's seeded draws into what that call gets.
//! Not for: timing (the schedule picks the behaviour), sockets (the data plane carries out the decision) or
//! counting (the recorder).
//!
//! Adding a share-based fault means one file with one type that implements [`Fault`], and one field on
//! [`Behaviour`].

pub mod empty;
pub mod error;
pub mod fail_first;
pub mod hang;
pub mod latency;
pub mod malformed;
pub mod proxy;
pub mod reset;
pub mod response;
pub mod slow_body;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use empty::Empty;
pub use error::ErrorResponse;
pub use fail_first::FailFirst;
pub use hang::Hang;
pub use latency::{Latency, LatencyModel, LogNormal, Normal};
pub use malformed::Malformed;
pub use proxy::Proxy;
pub use reset::Reset;
pub use response::{PreparedResponse, Response};
pub use slow_body::{ByteRate, SlowBody};

pub use crate::invalid::Invalid;

use crate::draw::CallDraws;

/// Checks that a status is a final HTTP status (200-599); 1xx are interim answers, not responses.
pub fn check_status(status: u16) -> Result<(), Invalid> {
    if (200..=599).contains(&status) {
        Ok(())
    } else {
        Err(Invalid::new(
            "",
            format!("{status} is not a final HTTP status (200-599)"),
        ))
    }
}

/// Checks header names and values.
pub fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), Invalid> {
    response::header_map(headers).map(|_| ())
}

/// A fault that takes a share of the calls: errors, hang, reset, empty, malformed.
pub trait Fault {
    /// The share of calls this fault takes.
    fn share(&self) -> Share;
    /// What a call taken by this fault gets.
    fn action(&self) -> CallAction<'_>;
}

/// What one call gets, after its delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CallAction<'a> {
    /// The healthy response (or the upstream's, in proxy mode).
    Healthy,
    /// One of the behaviour's error responses.
    Error(&'a ErrorResponse),
    /// One of the first N calls of a `fail_first` phase, answered with this status.
    FailFirst(u16),
    /// Held until the caller gives up; no delay applies.
    Hang,
    /// Connection reset (RST) with no response.
    Reset,
    /// Connection closed (FIN) with no response.
    Empty,
    /// Bytes that are not HTTP, then a close.
    Malformed,
}

/// The decision for one call: how long to wait, then what to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallDecision<'a> {
    /// The delay before the action (zero for a hang).
    pub delay: Duration,
    /// What the call gets.
    pub action: CallAction<'a>,
}

/// A route's behaviour: a route's base, or what a phase sets on top of it. Every field is optional; a phase's
/// behaviour replaces the base field by field ([`Behaviour::over`]), so `{latency: {fixed: 2s}}` keeps the base's
/// response and errors. The shares of `errors`, `hang`, `reset`, `empty` and `malformed` add up to at most 100%;
/// the rest of the calls get the healthy response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Behaviour {
    /// The delay before any answer (not before a hang).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
    /// Error responses, each with its share. `[]` clears the base's errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<ErrorResponse>>,
    /// The share of calls held until the caller gives up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang: Option<Hang>,
    /// The share of calls whose connection is reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<Reset>,
    /// The share of calls whose connection is closed with no response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty: Option<Empty>,
    /// The share of calls answered with bytes that are not HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub malformed: Option<Malformed>,
    /// Stream healthy bodies at this rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_body: Option<SlowBody>,
    /// Forward healthy calls to this upstream instead of answering them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Proxy>,
    /// The healthy response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Response>,
    /// The first N calls after this behaviour is set fail with a status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_first: Option<FailFirst>,
}

impl Behaviour {
    /// This behaviour laid over `base`: each field set here wins, each field left out comes from `base`.
    pub fn over(&self, base: &Behaviour) -> Behaviour {
        fn pick<T: Clone>(top: &Option<T>, base: &Option<T>) -> Option<T> {
            top.as_ref().or(base.as_ref()).cloned()
        }
        Behaviour {
            latency: pick(&self.latency, &base.latency),
            errors: pick(&self.errors, &base.errors),
            hang: pick(&self.hang, &base.hang),
            reset: pick(&self.reset, &base.reset),
            empty: pick(&self.empty, &base.empty),
            malformed: pick(&self.malformed, &base.malformed),
            slow_body: pick(&self.slow_body, &base.slow_body),
            proxy: pick(&self.proxy, &base.proxy),
            response: pick(&self.response, &base.response),
            fail_first: pick(&self.fail_first, &base.fail_first),
        }
    }

    /// Multiplies every duration by `factor` and divides every rate by it; counts and shares are unchanged.
    pub fn scale_time(&mut self, factor: f64) {
        if let Some(l) = &mut self.latency {
            l.scale_time(factor);
        }
        if let Some(s) = &mut self.slow_body {
            s.scale_time(factor);
        }
    }

    /// The share-based faults of this behaviour in decision order: errors, hang, reset, empty, malformed.
    fn fault_slot(&self, slot: usize, error_slots: usize) -> Option<&dyn Fault> {
        if slot < error_slots {
            return self.errors.as_ref()?.get(slot).map(|e| e as &dyn Fault);
        }
        match slot - error_slots {
            0 => self.hang.as_ref().map(|f| f as &dyn Fault),
            1 => self.reset.as_ref().map(|f| f as &dyn Fault),
            2 => self.empty.as_ref().map(|f| f as &dyn Fault),
            3 => self.malformed.as_ref().map(|f| f as &dyn Fault),
            _ => None,
        }
    }

    fn error_count(&self) -> usize {
        self.errors.as_ref().map_or(0, Vec::len)
    }

    /// Checks every parameter, and that the shares add up to at most 100%. Fields are named relative to this
    /// behaviour (`latency.p99`, `errors[1].status`).
    pub fn validate(&self) -> Result<(), Invalid> {
        if let Some(l) = &self.latency {
            l.model().map_err(|e| e.at("latency"))?;
        }
        for (i, e) in self.errors.iter().flatten().enumerate() {
            e.validate().map_err(|e| e.at(&format!("errors[{i}]")))?;
        }
        let n = self.error_count();
        let total: f64 = (0..n + 4)
            .filter_map(|s| self.fault_slot(s, n))
            .map(|f| f.share().fraction())
            .sum();
        if total > 1.0 + 1e-9 {
            let field = if n > 0 { "errors" } else { "" };
            return Err(Invalid::new(
                field,
                format!(
                    "the shares of errors, hang, reset, empty and malformed add up to {}%, over 100%",
                    (total * 1e4).round() / 1e2
                ),
            ));
        }
        if let Some(s) = &self.slow_body {
            s.validate().map_err(|e| e.at("slow_body"))?;
        }
        if let Some(p) = &self.proxy {
            p.validate().map_err(|e| e.at("proxy"))?;
            if self.response.is_some() {
                return Err(Invalid::new(
                    "response",
                    "give either proxy or response: a proxied call gets the upstream's answer",
                ));
            }
            if self.slow_body.is_some() {
                return Err(Invalid::new(
                    "slow_body",
                    "slow_body applies to faultd's own responses, not to proxied ones",
                ));
            }
        }
        if let Some(r) = &self.response {
            r.validate().map_err(|e| e.at("response"))?;
        }
        if let Some(f) = &self.fail_first {
            f.validate().map_err(|e| e.at("fail_first"))?;
        }
        Ok(())
    }
}

/// A behaviour made ready for the hot path: validated, its latency model and healthy response built once, and
/// the counter of its `fail_first` rule. One exists per (route, phase), so the count restarts with each phase.
#[derive(Debug)]
pub struct CompiledBehaviour {
    /// The behaviour as configured (already laid over the route's base).
    pub behaviour: Behaviour,
    latency: Option<LatencyModel>,
    /// The healthy response, built once.
    pub healthy: PreparedResponse,
    fail_first_used: AtomicU64,
}

impl CompiledBehaviour {
    /// Validates and prepares `behaviour`.
    pub fn compile(behaviour: &Behaviour) -> Result<CompiledBehaviour, Invalid> {
        behaviour.validate()?;
        let latency = behaviour
            .latency
            .as_ref()
            .map(Latency::model)
            .transpose()
            .map_err(|e| e.at("latency"))?;
        let healthy = behaviour
            .response
            .clone()
            .unwrap_or_default()
            .prepare()
            .map_err(|e| e.at("response"))?;
        Ok(CompiledBehaviour {
            behaviour: behaviour.clone(),
            latency,
            healthy,
            fail_first_used: AtomicU64::new(0),
        })
    }

    fn delay(&self, u: f64) -> Duration {
        self.latency
            .as_ref()
            .map_or(Duration::ZERO, |m| m.quantile(u))
    }
}

/// Decides what one call gets. `to` is the behaviour in force; during a ramp, `from` is the previous phase's and
/// `weight` (0..=1) how far the ramp has gone: every delay quantile and every fault share moves linearly from
/// `from`'s value to `to`'s. Pure but for `fail_first`, whose counter on `to` this call may consume.
pub fn decide<'a>(
    from: Option<&'a CompiledBehaviour>,
    to: &'a CompiledBehaviour,
    weight: f64,
    draws: CallDraws,
) -> CallDecision<'a> {
    let w = if from.is_some() {
        weight.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let delay_to = to.delay(draws.latency).as_secs_f64();
    let delay = match from {
        Some(f) if w < 1.0 => f.delay(draws.latency).as_secs_f64() * (1.0 - w) + delay_to * w,
        _ => delay_to,
    };
    let delay = Duration::from_secs_f64(delay.max(0.0));

    if let Some(rule) = to.behaviour.fail_first {
        if to.fail_first_used.load(Ordering::Relaxed) < rule.calls
            && to.fail_first_used.fetch_add(1, Ordering::Relaxed) < rule.calls
        {
            return CallDecision {
                delay,
                action: CallAction::FailFirst(rule.status),
            };
        }
    }

    let from_b = from.map(|f| &f.behaviour);
    let error_slots = to
        .behaviour
        .error_count()
        .max(from_b.map_or(0, Behaviour::error_count));
    let mut upper = 0.0;
    for slot in 0..error_slots + 4 {
        let later = to.behaviour.fault_slot(slot, error_slots);
        let earlier = from_b.and_then(|b| b.fault_slot(slot, error_slots));
        let share_to = later.map_or(0.0, |f| f.share().fraction());
        let share = match earlier {
            Some(e) if w < 1.0 => e.share().fraction() * (1.0 - w) + share_to * w,
            _ => {
                share_to
                    * if earlier.is_none() && from.is_some() {
                        w
                    } else {
                        1.0
                    }
            }
        };
        upper += share;
        if draws.fault < upper {
            if let Some(fault) = later.or(earlier) {
                let action = fault.action();
                let delay = if action == CallAction::Hang {
                    Duration::ZERO
                } else {
                    delay
                };
                return CallDecision { delay, action };
            }
        }
    }
    CallDecision {
        delay,
        action: CallAction::Healthy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(yaml: &str) -> CompiledBehaviour {
        let b: Behaviour = serde_saphyr::from_str(yaml).unwrap();
        CompiledBehaviour::compile(&b).unwrap()
    }

    fn share(s: &str) -> Share {
        s.parse().unwrap()
    }

    /// Counts actions over 100k seeded calls.
    fn tally(
        from: Option<&CompiledBehaviour>,
        to: &CompiledBehaviour,
        w: f64,
    ) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for n in 0..100_000 {
            let d = decide(from, to, w, CallDraws::new(3, 9, n));
            let key = match d.action {
                CallAction::Error(e) => format!("error {}", e.status),
                other => format!("{other:?}"),
            };
            *counts.entry(key).or_insert(0) += 1;
        }
        counts
    }

    fn assert_share(counts: &BTreeMap<String, u64>, key: &str, p: f64) {
        let got = *counts.get(key).unwrap_or(&0) as f64 / 100_000.0;
        let tolerance = 5.0 * (p * (1.0 - p) / 100_000.0).sqrt() + 1e-9;
        assert!(
            (got - p).abs() <= tolerance,
            "{key}: {got}, expected {p} +- {tolerance} in {counts:?}"
        );
    }

    #[test]
    fn each_fault_takes_its_share_and_the_rest_is_healthy() {
        let b = compiled(
            "{errors: [{share: 20%, status: 503}, {share: 10%, status: 429, headers: {retry-after: '5'}}], \
             hang: 5%, reset: 5%, empty: 5%, malformed: 5%}",
        );
        let counts = tally(None, &b, 1.0);
        assert_share(&counts, "error 503", 0.20);
        assert_share(&counts, "error 429", 0.10);
        assert_share(&counts, "Hang", 0.05);
        assert_share(&counts, "Reset", 0.05);
        assert_share(&counts, "Empty", 0.05);
        assert_share(&counts, "Malformed", 0.05);
        assert_share(&counts, "Healthy", 0.50);
    }

    #[test]
    fn shares_over_one_hundred_percent_are_refused() {
        let b: Behaviour =
            serde_saphyr::from_str("{errors: [{share: 70%, status: 503}], hang: 40%}").unwrap();
        let err = b.validate().unwrap_err();
        assert_eq!(err.field, "errors");
        assert!(err.message.contains("over 100%"), "{}", err.message);
    }

    #[test]
    fn fail_first_fails_exactly_the_first_n_calls() {
        let b = compiled("{fail_first: {calls: 20, status: 503}}");
        let actions: Vec<_> = (0..30)
            .map(|n| decide(None, &b, 1.0, CallDraws::new(1, 1, n)).action)
            .collect();
        assert!(actions[..20]
            .iter()
            .all(|a| *a == CallAction::FailFirst(503)));
        assert!(actions[20..].iter().all(|a| *a == CallAction::Healthy));
    }

    #[test]
    fn hang_has_no_delay_and_other_faults_wait_for_the_latency_first() {
        let hang = compiled("{latency: {fixed: 2s}, hang: 100%}");
        assert_eq!(
            decide(None, &hang, 1.0, CallDraws::new(1, 1, 0)).delay,
            Duration::ZERO
        );
        let reset = compiled("{latency: {fixed: 2s}, reset: 100%}");
        let d = decide(None, &reset, 1.0, CallDraws::new(1, 1, 0));
        assert_eq!(
            (d.delay, d.action),
            (Duration::from_secs(2), CallAction::Reset)
        );
    }

    #[test]
    fn ramp_blends_delay_and_error_share_linearly() {
        let from = compiled("{latency: {fixed: 40ms}}");
        let to = compiled("{latency: {fixed: 5s}, errors: [{share: 70%, status: 503}]}");
        let d = decide(Some(&from), &to, 0.5, CallDraws::new(1, 1, 0));
        assert_eq!(d.delay, Duration::from_millis(2520));
        assert_share(&tally(Some(&from), &to, 0.5), "error 503", 0.35);
        assert_share(&tally(Some(&from), &to, 0.0), "error 503", 0.0);
        assert_share(&tally(Some(&from), &to, 1.0), "error 503", 0.70);
    }

    #[test]
    fn ramp_to_fewer_errors_fades_the_old_ones_out() {
        let from = compiled("{errors: [{share: 60%, status: 500}]}");
        let to = compiled("{errors: []}");
        assert_share(&tally(Some(&from), &to, 0.25), "error 500", 0.45);
    }

    #[test]
    fn phase_behaviour_replaces_base_fields_it_sets_and_keeps_the_rest() {
        let base: Behaviour = serde_saphyr::from_str(
            "{latency: {p50: 40ms, p99: 80ms}, response: {body_size: 2KiB}, hang: 1%}",
        )
        .unwrap();
        let phase: Behaviour = serde_saphyr::from_str("{latency: {fixed: 2s}, hang: 0%}").unwrap();
        let merged = phase.over(&base);
        assert_eq!(merged.latency, Some(Latency::fixed(Duration::from_secs(2))));
        assert_eq!(merged.hang, Some(Hang(share("0%"))));
        assert_eq!(merged.response, base.response);
    }

    #[test]
    fn invalid_paths_are_prefixed_from_the_inside_out() {
        let e = Invalid::new("status", "bad")
            .at("errors[1]")
            .at("routes.pricing");
        assert_eq!(e.field, "routes.pricing.errors[1].status");
        assert_eq!(Invalid::new("[2]", "x").at("phases").field, "phases[2]");
    }
}
