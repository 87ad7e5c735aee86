//! Bad input gets a clear error naming the file, the line and the field; never a panic. Also the time scale.

use std::time::Duration;

use faultd::{Config, PhaseRoute};

const GOOD: &str = "seed: 7
routes:
  pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }
  payments: { method: POST, path: /payments/charge, latency: { fixed: 100ms },
              response: { status: 200, body_size: 2KiB, headers: { content-type: application/json } } }
phases:
  - { name: healthy,   at: 0s }
  - { name: brownout,  at: 20s, routes: { pricing: { latency: { fixed: 2s } } } }
  - { name: degrading, at: 30s, ramp: 10s, routes: { pricing: { latency: { fixed: 5s }, errors: [ { share: 70%, status: 503 } ] } } }
  - { name: recovered, at: 60s, routes: { pricing: healthy } }
  - { name: flaky,     at: 70s, routes: { pricing: { fail_first: { calls: 20, status: 503 } } } }
";

fn error_of(yaml: &str) -> faultd::ConfigError {
    Config::from_yaml(yaml, "scenario.yaml").unwrap_err()
}

#[test]
fn the_design_example_parses_and_lists_its_phases() {
    let config = Config::from_yaml(GOOD, "scenario.yaml").unwrap();
    let names: Vec<_> = config
        .phase_names()
        .into_iter()
        .map(|(n, at)| (n, at.as_secs()))
        .collect();
    assert_eq!(
        names,
        [
            ("healthy".into(), 0),
            ("brownout".into(), 20),
            ("degrading".into(), 30),
            ("recovered".into(), 60),
            ("flaky".into(), 70)
        ]
    );
    assert_eq!(config.phases[3].routes["pricing"], PhaseRoute::Healthy);
}

#[test]
fn each_bad_input_names_file_line_and_field() {
    // (what is wrong, the YAML, the line, the field, a phrase of the message)
    let cases: &[(&str, &str, usize, &str, &str)] = &[
        (
            "unknown field",
            "routes:\n  pricing: { path: /p, latncy: { fixed: 1s } }\n",
            2,
            "routes.pricing.latncy",
            "unknown field",
        ),
        (
            "duration with a space",
            "routes:\n  pricing:\n    path: /p\n    latency: { fixed: 5 sec }\n",
            4,
            "routes.pricing.latency.fixed",
            "is not a duration",
        ),
        ("negative duration", "routes:\n  p: { path: /p, latency: { fixed: -1s } }\n", 2, "routes.p.latency.fixed", "negative"),
        (
            "shares over 100%",
            "routes:\n  p:\n    path: /p\n    errors: [ { share: 70%, status: 503 } ]\n    hang: 40%\n",
            4,
            "routes.p.errors",
            "over 100%",
        ),
        (
            "a phase naming an unknown route",
            "routes:\n  pricing: { path: /p }\nphases:\n  - { name: a, at: 0s }\n  - { name: b, at: 1s, routes: { prcing: healthy } }\n",
            5,
            "phases[1].routes.prcing",
            "no route named \"prcing\"",
        ),
        (
            "phases out of order",
            "routes:\n  p: { path: /p }\nphases:\n  - { name: a, at: 5s }\n  - { name: b, at: 1s }\n",
            5,
            "phases[1].at",
            "ascending",
        ),
        (
            "a bad status in a phase",
            "routes:\n  p: { path: /p }\nphases:\n  - name: a\n    at: 0s\n    routes:\n      p: { errors: [ { share: 10%, status: 999 } ] }\n",
            7,
            "phases[0].routes.p.errors[0].status",
            "not a final HTTP status",
        ),
        ("a bare number as a share", "routes:\n  p: { path: /p, hang: 30 }\n", 2, "routes.p.hang", "% sign"),
        ("a path without a slash", "routes:\n  p: { path: price }\n", 2, "routes.p.path", "must start with /"),
    ];
    for (what, yaml, line, field, phrase) in cases {
        let e = error_of(yaml);
        let text = e.to_string();
        assert_eq!(e.file.as_deref(), Some("scenario.yaml"), "{what}: {text}");
        assert_eq!(e.line, Some(*line), "{what}: {text}");
        assert_eq!(e.field, *field, "{what}: {text}");
        assert!(e.message.contains(phrase), "{what}: {text}");
        assert!(
            text.starts_with(&format!("scenario.yaml:{line}:")),
            "{what}: {text}"
        );
    }
}

#[test]
fn malformed_yaml_is_an_error_with_a_line_not_a_panic() {
    let e = error_of("routes:\n  p: { path: /p\n  q: [\n");
    assert_eq!(e.file.as_deref(), Some("scenario.yaml"));
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn json_is_accepted_too() {
    let json = r#"{"routes": {"p": {"path": "/p", "latency": {"fixed": "10ms"}}}}"#;
    assert!(Config::from_yaml(json, "c.json").is_ok());
}

#[test]
fn scaling_time_scales_durations_and_divides_rates_but_keeps_counts() {
    let mut config = Config::from_yaml(
        &format!("{GOOD}  - {{ name: trickle, at: 80s, routes: {{ payments: {{ slow_body: {{ rate: 500B/s }} }} }} }}\n"),
        "s.yaml",
    )
    .unwrap();
    config.scale_time(0.1);
    assert_eq!(config.phases[1].at.get(), Duration::from_secs(2));
    assert_eq!(config.phases[2].ramp.unwrap().get(), Duration::from_secs(1));
    let PhaseRoute::Set(brownout) = &config.phases[1].routes["pricing"] else {
        panic!()
    };
    assert_eq!(
        brownout.latency.as_ref().unwrap().fixed.unwrap().get(),
        Duration::from_millis(200)
    );
    assert_eq!(
        config.routes["pricing"]
            .latency
            .as_ref()
            .unwrap()
            .p50
            .unwrap()
            .get(),
        Duration::from_millis(4)
    );
    let PhaseRoute::Set(flaky) = &config.phases[4].routes["pricing"] else {
        panic!()
    };
    assert_eq!(flaky.fail_first.unwrap().calls, 20);
    let PhaseRoute::Set(trickle) = &config.phases[5].routes["payments"] else {
        panic!()
    };
    assert_eq!(trickle.slow_body.unwrap().rate.bytes_per_sec(), 5000.0);
    assert_eq!(config.bucket(), Duration::from_millis(100));
}

#[test]
fn the_configuration_has_a_json_schema() {
    let schema = serde_json::to_value(schemars::schema_for!(Config)).unwrap();
    let text = schema.to_string();
    for word in [
        "routes",
        "phases",
        "latency",
        "fail_first",
        "slow_body",
        "healthy",
        "matched",
        "grpc_metadata",
        "every",
    ] {
        assert!(text.contains(word), "{word} missing from the schema");
    }
}

#[test]
fn tcp_routes_name_the_line_and_field_of_what_is_wrong() {
    let e = error_of(
        "routes:\n  db: { tcp: { upstream: 127.0.0.1:6379 } }\nphases:\n  - { name: brownout, at: 1s, routes: { db: { toxics: [ { type: latency, attributes: { latency: -5 } } ] } } }\n",
    );
    assert_eq!(e.line, Some(4), "{e}");
    assert!(
        e.field
            .starts_with("phases[0].routes.db.toxics[0].attributes"),
        "{e}"
    );
    let e =
        error_of("routes:\n  db: { tcp: { upstream: 127.0.0.1:6379 }, latency: { fixed: 1s } }\n");
    assert_eq!(e.field, "routes.db.latency", "{e}");
    assert!(e.to_string().contains("a TCP route takes `toxics`"), "{e}");
    let e = error_of("routes:\n  api: { path: /x, toxics: [ { type: latency } ] }\n");
    assert_eq!(e.field, "routes.api.toxics", "{e}");
    let e = error_of("routes:\n  db: { tcp: { listen: 0.0.0.0:1, upstream: 127.0.0.1:6379 } }\n");
    assert_eq!(e.field, "routes.db.tcp.listen", "{e}");
    assert_eq!(e.line, Some(2), "{e}");
    let e = error_of(
        "routes:\n  db: { tcp: { upstream: 127.0.0.1:6379 }, toxics: [ { type: latenzy } ] }\n",
    );
    assert_eq!(e.field, "routes.db.toxics[0].type", "{e}");
}

#[test]
fn matched_entries_name_the_line_and_field_of_what_is_wrong() {
    let e = error_of(
        "routes:\n  orders:\n    path: /orders\n    matched:\n      - { match: { method: POST } }\n      - { match: { header: { x-tenant: '(' } } }\n",
    );
    assert_eq!(
        e.field, "routes.orders.matched[1].match.header.x-tenant",
        "{e}"
    );
    assert_eq!(e.line, Some(6), "{e}");
    assert!(e.to_string().contains("not a regular expression"), "{e}");
    let e = error_of(
        "routes:\n  orders: { path: /orders }\nphases:\n  - { name: a, at: 1s, routes: { orders: { matched: [ { first: 1, per: route } ] } } }\n",
    );
    assert_eq!(e.field, "phases[0].routes.orders.matched[0].per", "{e}");
    assert_eq!(e.line, Some(4), "{e}");
    let e = error_of(
        "routes:\n  db: { tcp: { upstream: 127.0.0.1:6379 }, matched: [ { every: 2 } ] }\n",
    );
    assert_eq!(e.field, "routes.db.matched", "{e}");
    assert!(e.to_string().contains("a TCP route takes `toxics`"), "{e}");
}

#[test]
fn tcp_toxics_follow_the_time_scale() {
    let mut c = Config::from_yaml(
        "routes:\n  db: { tcp: { upstream: 127.0.0.1:6379 }, toxics: [ { type: latency, attributes: { latency: 2000 } } ] }\n",
        "t.yaml",
    )
    .unwrap();
    c.scale_time(0.1);
    let t = &c.routes["db"].toxics.as_ref().unwrap()[0];
    assert_eq!(t.attributes.as_ref().unwrap()["latency"], 200);
}
