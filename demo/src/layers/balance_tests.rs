//! The balancer under paused time: round robin, ejection on failures in a row or on a failure rate, ejections
//! that grow, the cap on the share ejected, and the `no_outlier_ejection` mistake.

use std::time::Duration;

use tokio::time::Instant;
use tower::ServiceExt;

use super::*;
use crate::layers::mock::{self, Dependency};
use crate::settings::OutlierConfig;
use faultline_units::Share;

fn config() -> OutlierConfig {
    OutlierConfig {
        failure_rate: None,
        ..OutlierConfig::default()
    }
}

fn request() -> DepRequest {
    DepRequest {
        method: axum::http::Method::GET,
        path: "/price/1".into(),
        body: bytes::Bytes::new(),
        key: "1".into(),
        idempotency_key: None,
        context: Default::default(),
    }
}

/// Three endpoints; the second answers 503 to every call.
fn endpoints() -> Vec<Dependency> {
    (0..3)
        .map(|i| {
            Dependency::new(move |_| {
                let result = if i == 1 {
                    mock::status(503)
                } else {
                    mock::ok("{}")
                };
                (Duration::from_millis(5), result)
            })
        })
        .collect()
}

#[test]
fn calls_go_round_robin_while_every_endpoint_is_healthy() {
    let mut o = Outliers::new(3, Some(config()));
    let now = Instant::now();
    let picks: Vec<usize> = (0..6).map(|_| o.pick(now)).collect();
    assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
}

#[tokio::test(start_paused = true)]
async fn five_failures_in_a_row_eject_an_endpoint_for_the_base_ejection() {
    let mut o = Outliers::new(3, Some(config()));
    let start = Instant::now();
    for _ in 0..4 {
        o.record(1, true, start);
    }
    assert!(!o.is_ejected(1, start));
    o.record(1, true, start);
    assert!(o.is_ejected(1, start));
    assert_eq!(o.ejected_for(1, start), Some(Duration::from_secs(5)));
    let picks: Vec<usize> = (0..4).map(|_| o.pick(start)).collect();
    assert!(!picks.contains(&1), "{picks:?}");
    let later = start + Duration::from_secs(5);
    assert!(!o.is_ejected(1, later));
    assert!((0..3).map(|_| o.pick(later)).any(|i| i == 1));
}

#[tokio::test(start_paused = true)]
async fn a_success_between_failures_starts_the_count_again() {
    let mut o = Outliers::new(3, Some(config()));
    let now = Instant::now();
    for _ in 0..4 {
        o.record(1, true, now);
    }
    o.record(1, false, now);
    for _ in 0..4 {
        o.record(1, true, now);
    }
    assert!(!o.is_ejected(1, now));
}

#[tokio::test(start_paused = true)]
async fn each_ejection_lasts_longer_up_to_the_longest() {
    let mut o = Outliers::new(3, Some(config()));
    let mut now = Instant::now();
    let mut lengths = Vec::new();
    for _ in 0..14 {
        for _ in 0..5 {
            o.record(2, true, now);
        }
        let length = o.ejected_for(2, now).unwrap();
        lengths.push(length.as_secs());
        now += length;
    }
    assert_eq!(&lengths[..4], [5, 10, 15, 20]);
    assert_eq!(*lengths.last().unwrap(), 60);
}

#[tokio::test(start_paused = true)]
async fn a_failure_rate_over_the_interval_ejects_once_it_has_enough_calls() {
    let mut o = Outliers::new(
        3,
        Some(OutlierConfig {
            consecutive_failures: 0,
            failure_rate: Some(Share::from_fraction(0.5)),
            min_calls: 10,
            ..OutlierConfig::default()
        }),
    );
    let now = Instant::now();
    // Alternating: never two failures in a row, half of them failures.
    for n in 0..9 {
        o.record(0, n % 2 == 0, now);
    }
    assert!(!o.is_ejected(0, now), "9 calls are under min_calls");
    o.record(0, true, now);
    assert!(o.is_ejected(0, now));
}

#[tokio::test(start_paused = true)]
async fn no_more_than_the_capped_share_of_endpoints_is_ejected() {
    let mut o = Outliers::new(3, Some(config()));
    let now = Instant::now();
    for i in 0..3 {
        for _ in 0..5 {
            o.record(i, true, now);
        }
    }
    // 50% of 3 rounds down to one endpoint.
    assert_eq!(o.ejected(now), 1);
    let mut all = Outliers::new(
        2,
        Some(OutlierConfig {
            max_ejected: Share::from_fraction(1.0),
            ..config()
        }),
    );
    for i in 0..2 {
        for _ in 0..5 {
            all.record(i, true, now);
        }
    }
    assert_eq!(all.ejected(now), 1, "one endpoint always serves");
}

#[tokio::test(start_paused = true)]
async fn the_balancer_stops_calling_the_sick_endpoint() {
    let deps = endpoints();
    let balancer = Balancer::new(deps.clone(), Some(config()));
    let mut failed = 0;
    for _ in 0..60 {
        if balancer.clone().oneshot(request()).await.is_err() {
            failed += 1;
        }
    }
    // Five calls in a row fail at the sick endpoint before it is ejected; the 5 s ejection outlasts the run.
    assert_eq!(failed, 5);
    assert_eq!(deps[1].calls(), 5);
    assert_eq!(deps[0].calls() + deps[2].calls(), 55);
}

#[tokio::test(start_paused = true)]
async fn without_outlier_ejection_a_third_of_the_calls_fail() {
    let deps = endpoints();
    let balancer = Balancer::new(deps.clone(), None);
    let mut failed = 0;
    for _ in 0..60 {
        if balancer.clone().oneshot(request()).await.is_err() {
            failed += 1;
        }
    }
    assert_eq!(failed, 20);
    assert_eq!(deps[1].calls(), 20);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_dropped_before_its_answer_counts_as_a_failure() {
    let slow = Dependency::new(|_| (Duration::from_secs(10), mock::ok("{}")));
    let balancer = Balancer::new(vec![slow.clone(), slow.clone()], Some(config()));
    for _ in 0..10 {
        let call = balancer.clone().oneshot(request());
        assert!(tokio::time::timeout(Duration::from_millis(100), call)
            .await
            .is_err());
    }
    // Alternating endpoints, five timeouts each: one is ejected, the other kept (the cap).
    let outliers = balancer.outliers();
    assert_eq!(outliers.ejected(Instant::now()), 1);
}
