//! The behaviours' tests: parsing, validation, compiling, and the decision each call gets from its draws.

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
