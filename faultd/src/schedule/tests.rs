//! The schedule's tests: phases switching at their exact start, ramps, `fail_first` per phase, freezing, resets
//! and overrides, under paused time.

use super::*;
use crate::behaviours::{decide, CallAction};
use crate::config::Config;
use crate::draw::CallDraws;
use crate::recorder::Recorder;

const SCENARIO: &str = "
seed: 7
routes:
  pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }
  payments: { method: POST, path: /payments/charge, latency: { fixed: 100ms } }
phases:
  - { name: healthy,   at: 0s }
  - { name: brownout,  at: 20s, routes: { pricing: { latency: { fixed: 2s } } } }
  - { name: degrading, at: 30s, ramp: 10s, routes: { pricing: { latency: { fixed: 5s }, errors: [ { share: 70%, status: 503 } ] } } }
  - { name: recovered, at: 60s, routes: { pricing: healthy } }
  - { name: flaky,     at: 70s, routes: { pricing: { fail_first: { calls: 20, status: 503 } } } }
";

fn live() -> Live {
    let config = Config::from_yaml(SCENARIO, "test.yaml").unwrap();
    let recorder = Recorder::new(config.bucket());
    Live::new(Arc::new(Plan::compile(config, 7, &recorder).unwrap()))
}

fn delay_of(live: &Live, now: Instant) -> Duration {
    let r = live.resolve(0, now);
    let pricing = live.plan.route_index("pricing").unwrap();
    let r2 = live.resolve(pricing, now);
    let _ = r;
    decide(
        r2.from.as_deref(),
        &r2.to,
        r2.weight,
        CallDraws::new(1, 1, 0),
    )
    .delay
}

#[tokio::test(start_paused = true)]
async fn phases_switch_at_their_exact_start() {
    let mut live = live();
    let origin = Instant::now();
    live.start(origin);
    tokio::time::advance(Duration::from_secs(20) - Duration::from_nanos(1)).await;
    assert_eq!(
        live.current_phase(Instant::now()).as_deref(),
        Some("healthy")
    );
    assert!(delay_of(&live, Instant::now()) < Duration::from_millis(200));
    tokio::time::advance(Duration::from_nanos(1)).await;
    assert_eq!(
        live.current_phase(Instant::now()).as_deref(),
        Some("brownout")
    );
    assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(2));
    tokio::time::advance(Duration::from_secs(40)).await;
    assert_eq!(
        live.current_phase(Instant::now()).as_deref(),
        Some("recovered")
    );
    assert!(delay_of(&live, Instant::now()) < Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn a_ramp_moves_the_delay_linearly_from_the_previous_phase() {
    let mut live = live();
    live.start(Instant::now());
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(2));
    tokio::time::advance(Duration::from_millis(2500)).await;
    // A quarter of the way from 2 s to 5 s.
    assert_eq!(delay_of(&live, Instant::now()), Duration::from_millis(2750));
    tokio::time::advance(Duration::from_millis(7500)).await;
    assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(5));
    let pricing = live.plan.route_index("pricing").unwrap();
    assert_eq!(live.resolve(pricing, Instant::now()).weight, 1.0);
}

#[tokio::test(start_paused = true)]
async fn fail_first_counts_from_the_start_of_its_phase() {
    let mut live = live();
    live.start(Instant::now());
    tokio::time::advance(Duration::from_secs(70)).await;
    let pricing = live.plan.route_index("pricing").unwrap();
    let actions: Vec<_> = (0..25)
        .map(|n| {
            let r = live.resolve(pricing, Instant::now());
            matches!(
                decide(None, &r.to, 1.0, CallDraws::new(1, 1, n)).action,
                CallAction::FailFirst(503)
            )
        })
        .collect();
    assert_eq!(actions.iter().filter(|f| **f).count(), 20);
    assert!(actions[..20].iter().all(|f| *f));
}

#[tokio::test(start_paused = true)]
async fn stop_freezes_the_phase_and_reset_restores_base_behaviour() {
    let mut live = live();
    live.start(Instant::now());
    tokio::time::advance(Duration::from_secs(25)).await;
    live.stop(Instant::now());
    tokio::time::advance(Duration::from_secs(100)).await;
    assert_eq!(
        live.current_phase(Instant::now()).as_deref(),
        Some("brownout")
    );
    assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(2));
    live.reset_to_healthy(Instant::now());
    assert_eq!(
        live.current_phase(Instant::now()).as_deref(),
        Some(HEALTHY_RESET)
    );
    assert!(delay_of(&live, Instant::now()) < Duration::from_millis(200));
    let entered: Vec<_> = live
        .phases_entered(Instant::now())
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(entered, ["healthy", "brownout", HEALTHY_RESET]);
}

#[tokio::test(start_paused = true)]
async fn an_override_holds_until_the_next_phase() {
    let mut live = live();
    live.start(Instant::now());
    let pricing = live.plan.route_index("pricing").unwrap();
    let set = PhaseRoute::Set(Box::new(Behaviour {
        latency: Some(crate::behaviours::Latency::fixed(Duration::from_secs(9))),
        ..Behaviour::default()
    }));
    live.set_override(pricing, &set, Instant::now()).unwrap();
    assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(9));
    tokio::time::advance(Duration::from_secs(20)).await;
    assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(2));
}

#[test]
fn before_the_first_phase_calls_are_labelled_before_start() {
    let live = live();
    let plan = &live.plan;
    assert_eq!(
        &*plan.label(Position {
            phase: None,
            weight: 1.0
        }),
        BEFORE_FIRST_PHASE
    );
    // Not started: the routes behave as at t = 0, which is the first phase here.
    assert_eq!(
        live.current_phase(Instant::now()).as_deref(),
        Some("healthy")
    );
}

#[tokio::test(start_paused = true)]
async fn matched_entries_follow_the_phases_and_count_into_the_route_recorder_by_name() {
    let config = Config::from_yaml(
        "routes:\n  orders: { path: /orders, matched: [ { name: acme, every: 2, errors: [ { share: 100%, status: 503 } ] } ] }\n\
         phases:\n  - { name: quiet, at: 10s, routes: { orders: { matched: [] } } }\n  \
         - { name: again, at: 20s, routes: { orders: { latency: { fixed: 1ms } } } }\n",
        "test.yaml",
    )
    .unwrap();
    let recorder = Arc::new(Recorder::new(config.bucket()));
    let mut live = Live::new(Arc::new(Plan::compile(config, 7, &recorder).unwrap()));
    let origin = Instant::now();
    live.start(origin);
    recorder.set_origin(origin, 1);
    let (method, uri, headers) = (
        axum::http::Method::GET,
        axum::http::Uri::from_static("/orders"),
        axum::http::HeaderMap::new(),
    );
    let facts = crate::behaviours::CallFacts {
        method: &method,
        uri: &uri,
        headers: &headers,
    };
    let connection = crate::behaviours::ConnectionCounts::default();
    // Which of three calls at `t` an entry takes.
    let taken = |live: &Live, t: u64| -> Vec<bool> {
        let to = live.resolve(0, origin + Duration::from_secs(t)).to;
        (0..3)
            .map(|_| to.matched_entry(&facts, &connection).is_some())
            .collect()
    };
    assert_eq!(taken(&live, 0), [false, true, false]);
    assert_eq!(
        taken(&live, 10),
        [false, false, false],
        "quiet clears the list"
    );
    // A phase that names the route compiles the base's entry anew: its count starts again.
    assert_eq!(taken(&live, 20), [false, true, false]);
    // An override's entry of the same name counts into the same place.
    let set: PhaseRoute =
        serde_saphyr::from_str("{ matched: [ { name: acme, calls: [1] } ] }").unwrap();
    live.set_override(0, &set, origin + Duration::from_secs(20))
        .unwrap();
    assert_eq!(taken(&live, 20), [true, false, false]);
    drop(recorder.arrive(live.plan.routes[0].recorder.clone(), Arc::from("again")));
    let counts = recorder.snapshot().routes["orders"].matched["acme"];
    assert_eq!((counts.matched, counts.taken), (9, 3));
}
