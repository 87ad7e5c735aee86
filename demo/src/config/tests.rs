//! The configuration as a specification: defaults, partial overrides, every spelling, validation messages,
//! time scaling and the round trip through YAML and the JSON schema.

use faultline_units::{Dur, Share};

use super::*;
use crate::settings::{HedgeAfter, HedgeConfig, RetryConfig};

fn ms(v: u64) -> Dur {
    Dur::from_millis(v)
}

#[test]
fn the_mistakes_help_says_how_many_instant_reconnects_in_plain_words() {
    use clap::ValueEnum;
    let help = Mistake::InstantReconnect
        .to_possible_value()
        .and_then(|v| v.get_help().map(|h| h.to_string()))
        .unwrap_or_default();
    let times = crate::layers::retry::INSTANT_RECONNECTS;
    assert!(help.contains(&format!("up to {times} times")), "{help}");
    assert!(!help.contains('['), "no rustdoc link in --help: {help}");
}

#[test]
fn an_empty_section_is_the_recommended_configuration_of_all_six_operations() {
    let c = DemoConfig::from_yaml("{}", "demo.yaml").unwrap();
    assert_eq!(c, DemoConfig::default());
    let pricing = c.operations.pricing.as_ref().unwrap();
    assert_eq!(pricing.timeout, ms(250));
    assert_eq!(pricing.pool, 200);
    assert_eq!(pricing.breaker.failure_rate, Share::from_fraction(0.5));
    assert_eq!(pricing.breaker.window, ms(10_000));
    assert_eq!(pricing.breaker.min_calls, 20);
    assert_eq!(pricing.breaker.open_for, ms(30_000));
    assert_eq!(pricing.breaker.half_open_calls, 1);
    assert_eq!(c.operations.configured().count(), 6);
}

#[test]
fn only_listed_operations_are_configured_and_omitted_fields_keep_the_recommended_value() {
    let text = "
operations:
  pricing: { timeout: 100ms, breaker: { min_calls: 5 } }
  reviews:
mistakes: [ no_timeout, count_4xx ]
instances: 3
";
    let c = DemoConfig::from_yaml(text, "demo.yaml").unwrap();
    let pricing = c.operations.pricing.as_ref().unwrap();
    assert_eq!(pricing.timeout, ms(100));
    assert_eq!(pricing.breaker.min_calls, 5);
    assert_eq!(
        pricing.breaker.window,
        ms(10_000),
        "untouched breaker fields stay recommended"
    );
    assert_eq!(pricing.pool, 200);
    assert_eq!(c.operations.reviews, Some(Operation::Reviews.recommended()));
    assert!(c.operations.payments.is_none());
    assert_eq!(c.instances, 3);
    assert!(c.has(Mistake::NoTimeout) && c.has(Mistake::Count4xx) && !c.has(Mistake::BareCount));
}

#[test]
fn the_brief_example_parses_with_every_spelling() {
    let text = "
instances: 1
shared_counters: false
operations:
  pricing: { timeout: 250ms, pool: 200, fallback: stale,
             breaker: { failure_rate: 50%, window: 10s, min_calls: 20, open_for: 30s, half_open_calls: 1,
                        close_after: 1, slow_call_duration: 1s, slow_call_rate: 100%, recovery_rate: null } }
  reviews:  { timeout: 800ms, pool: 80, fallback: default }
  payments: { timeout: 2s, pool: 50, fallback: { unavailable: { retry_after: 5s } },
              retries: { max: 2, backoff: 50ms, budget: 10% } }
mistakes: [ no_timeout ]
";
    let c = DemoConfig::from_yaml(text, "demo.yaml").unwrap();
    let p = c.operations.payments.as_ref().unwrap();
    assert_eq!(
        p.fallback,
        Fallback::Unavailable {
            retry_after: ms(5_000)
        }
    );
    assert_eq!(
        p.retries,
        RetryConfig {
            max: 2,
            backoff: ms(50),
            budget: Share::from_fraction(0.1)
        }
    );
    assert_eq!(
        c.operations.reviews.as_ref().unwrap().fallback,
        Fallback::Default
    );
}

#[test]
fn every_mistake_name_parses_from_yaml_and_matches_its_documented_name() {
    for m in Mistake::ALL {
        let c = DemoConfig::from_yaml(&format!("mistakes: [ {} ]", m.name()), "d.yaml").unwrap();
        assert!(c.has(m), "{}", m.name());
    }
}

#[test]
fn unknown_fields_and_unknown_mistakes_are_refused_with_file_and_line() {
    let e = DemoConfig::from_yaml("operations:\n  pricing: { timout: 1s }\n", "demo.yaml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("demo.yaml") && e.contains("timout"), "{e}");
    assert!(
        e.contains("line 2") || e.contains(":2:") || e.contains("2:"),
        "{e}"
    );
    let e = DemoConfig::from_yaml("mistakes: [ no_breaker ]\n", "demo.yaml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("no_breaker"), "{e}");
    let e = DemoConfig::from_yaml("operations: { pricing: { timeout: 250 } }\n", "demo.yaml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs a unit"), "{e}");
}

#[test]
fn validation_names_the_field_that_is_wrong() {
    let cases = [
        ("instances: 0", "instances"),
        (
            "operations: { pricing: { pool: 0 } }",
            "operations.pricing.pool",
        ),
        (
            "operations: { pricing: { timeout: 0s } }",
            "operations.pricing.timeout",
        ),
        (
            "operations: { pricing: { breaker: { window: 0s } } }",
            "operations.pricing.breaker.window",
        ),
        (
            "operations: { pricing: { breaker: { min_calls: 0 } } }",
            "operations.pricing.breaker.min_calls",
        ),
        (
            "operations: { pricing: { breaker: { close_after: 0 } } }",
            "operations.pricing.breaker.close_after",
        ),
        (
            "operations: { pricing: { breaker: { failure_rate: 50%, recovery_rate: 60% } } }",
            "operations.pricing.breaker.recovery_rate",
        ),
        (
            "operations: { payments: { fallback: stale } }",
            "operations.payments.fallback",
        ),
        (
            "operations: { account-write: { fallback: default } }",
            "operations.account-write.fallback",
        ),
        ("operations: {}", "operations"),
        ("operations: { cart: {} }", "operations.cart"),
    ];
    for (text, field) in cases {
        let e = DemoConfig::from_yaml(text, "demo.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{text}: {e}");
        assert!(e.contains("demo.yaml"), "{text}: {e}");
    }
}

#[test]
fn scale_time_multiplies_every_duration_and_keeps_counts_and_shares() {
    let mut c = DemoConfig::default();
    c.scale_time(0.1);
    let p = c.operations.payments.as_ref().unwrap();
    assert_eq!(p.timeout, ms(200), "2s at 0.1 is 200ms");
    assert_eq!(p.breaker.window, ms(1_000));
    assert_eq!(p.breaker.open_for, ms(3_000));
    assert_eq!(p.breaker.slow_call_duration, ms(120));
    assert_eq!(p.retries.backoff, ms(5));
    assert_eq!(p.outlier.base_ejection, ms(500));
    assert_eq!(p.outlier.interval, ms(1_000));
    assert_eq!(p.outlier.max_ejection, ms(6_000));
    assert_eq!(p.outlier.consecutive_failures, 5);
    assert_eq!(
        p.fallback,
        Fallback::Unavailable {
            retry_after: ms(500)
        }
    );
    assert_eq!(p.pool, 50);
    assert_eq!(p.breaker.min_calls, 10);
    assert_eq!(p.breaker.half_open_calls, 2);
    assert_eq!(p.retries.budget, Share::from_fraction(0.1));
    assert_eq!(c.operations.pricing.as_ref().unwrap().timeout, ms(25));
}

#[test]
fn endpoints_read_as_one_joined_string_or_a_list_and_outlier_overrides_merge() {
    let c = DemoConfig::from_yaml(
        "operations: { pricing: { endpoints: \"http://a:1, http://b:2,\", outlier: { consecutive_failures: 3 } }, reviews: { endpoints: [ http://c:3 ] } }",
        "demo.yaml",
    )
    .unwrap();
    let pricing = c.operations.pricing.as_ref().unwrap();
    assert_eq!(pricing.endpoints, ["http://a:1", "http://b:2"]);
    assert_eq!(pricing.outlier.consecutive_failures, 3);
    assert_eq!(pricing.outlier.base_ejection, ms(5_000));
    assert_eq!(
        c.operations.reviews.as_ref().unwrap().endpoints,
        ["http://c:3"]
    );
    let grpc = DemoConfig::from_yaml(
        "protocol: grpc\noperations: { pricing: { endpoints: \"http://a:1\" } }",
        "demo.yaml",
    );
    assert!(grpc.unwrap_err().to_string().contains("endpoints"));
}

#[test]
fn the_redis_operation_is_configured_only_when_named_and_with_an_address() {
    assert!(DemoConfig::default().operations.cart.is_none());
    let c = DemoConfig::from_yaml(
        "redis: 127.0.0.1:6379\noperations: { cart: { timeout: 50ms } }",
        "demo.yaml",
    )
    .unwrap();
    let cart = c.operations.cart.as_ref().unwrap();
    assert_eq!(cart.timeout, ms(50));
    assert_eq!(cart.pool, 20, "the rest is recommended");
    assert_eq!(c.operations.configured().count(), 1);
}

#[test]
fn a_serialised_config_reads_back_the_same() {
    let mut c = DemoConfig::default();
    c.mistakes.insert(Mistake::BareCount);
    c.instances = 4;
    c.protocol = Protocol::Grpc;
    let text = serde_saphyr::to_string(&c).unwrap();
    assert_eq!(
        DemoConfig::from_yaml(&text, "round-trip.yaml").unwrap(),
        c,
        "{text}"
    );
}

#[test]
fn the_json_schema_lists_every_operation_and_mistake() {
    let schema = serde_json::to_string(&schemars::schema_for!(DemoConfig)).unwrap();
    for op in Operation::ALL {
        assert!(schema.contains(op.key()), "{}", op.key());
    }
    for m in Mistake::ALL {
        assert!(schema.contains(m.name()), "{}", m.name());
    }
}

#[test]
fn hedging_is_off_unless_set_and_reads_p95_or_a_duration() {
    let c = DemoConfig::from_yaml("operations: { pricing: {} }", "d.yaml").unwrap();
    assert_eq!(c.operations.pricing.unwrap().hedge, None);
    let yaml = "operations: { pricing: { hedge: { after: p95, max: 1 } }, reviews: { hedge: { after: 100ms, max: 2 } } }";
    let mut c = DemoConfig::from_yaml(yaml, "d.yaml").unwrap();
    let hedge = |c: &DemoConfig, op| c.operations.get(op).unwrap().hedge.unwrap();
    assert_eq!(
        hedge(&c, Operation::Pricing),
        HedgeConfig {
            after: HedgeAfter::P95,
            max: 1
        }
    );
    assert_eq!(
        hedge(&c, Operation::Reviews).after,
        HedgeAfter::Fixed(ms(100))
    );
    c.scale_time(2.0);
    assert_eq!(
        hedge(&c, Operation::Reviews).after,
        HedgeAfter::Fixed(ms(200))
    );
    assert_eq!(hedge(&c, Operation::Pricing).after, HedgeAfter::P95);
    for (bad, field) in [
        ("{ after: p95, max: 0 }", "operations.pricing.hedge.max"),
        ("{ after: p95, max: 5 }", "operations.pricing.hedge.max"),
        ("{ after: 0s, max: 1 }", "operations.pricing.hedge.after"),
    ] {
        let yaml = format!("operations: {{ pricing: {{ hedge: {bad} }} }}");
        let err = DemoConfig::from_yaml(&yaml, "d.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{bad}: {err}");
    }
    let err = DemoConfig::from_yaml(
        "operations: { pricing: { hedge: { after: p99, max: 1 } } }",
        "d.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("expected p95 or a duration"), "{err}");
}
