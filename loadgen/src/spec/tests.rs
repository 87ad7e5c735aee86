//! The `load:` section parsed and checked: the contract example, refusals that name their field, time scaling.

use super::*;

const CONTRACT_EXAMPLE: &str = r#"
rate: [ { at: 0s, rate: 100/s }, { at: 10s, ramp_to: 500/s, over: 5s }, { at: 40s, rate: 50/s } ]
arrivals: poisson
timeout: 5s
max_in_flight: 10000
connections: 1000
requests:
  - { get: "/product/{rand:1..1000}", weight: 9 }
  - { post: "/checkout", body: '{"amount": 10}', headers: { content-type: application/json }, weight: 1 }
fallback_header: X-Fallback
fallback_status: [ ]
"#;

#[test]
fn the_contract_example_parses_and_validates() {
    let spec: LoadSpec = serde_saphyr::from_str(CONTRACT_EXAMPLE).unwrap();
    spec.validate().unwrap();
    assert_eq!(spec.arrivals, Arrivals::Poisson);
    assert_eq!(spec.requests.len(), 2);
    assert_eq!(
        spec.requests[1].method_and_path().unwrap(),
        ("POST", "/checkout")
    );
    let Some(RateSpec::Segments(segments)) = &spec.rate else {
        panic!("expected segments")
    };
    assert_eq!(segments[1].ramp_to.unwrap().per_sec(), 500.0);
    let single: LoadSpec = serde_saphyr::from_str("rate: 500/s\nrequests: [ { get: / } ]").unwrap();
    assert_eq!(
        single.rate,
        Some(RateSpec::Constant("500/s".parse().unwrap()))
    );
    assert_eq!(single.timeout, Dur::from_millis(5000));
    assert_eq!(
        single.coalesce,
        "100us".parse().unwrap(),
        "the default window"
    );
    for window in ["0s", "1ms", "10ms"] {
        let spec: LoadSpec = serde_saphyr::from_str(&format!(
            "rate: 500/s\ncoalesce: {window}\nrequests: [ {{ get: / }} ]"
        ))
        .unwrap();
        assert_eq!(spec.coalesce, window.parse().unwrap());
        spec.validate().unwrap();
    }
}

#[test]
fn unknown_fields_and_unit_less_rates_are_refused_with_the_reason() {
    let e = serde_saphyr::from_str::<LoadSpec>("rate: 500/s\nrequests: []\nburst: 3").unwrap_err();
    assert!(e.to_string().contains("burst"), "{e}");
    let e = serde_saphyr::from_str::<LoadSpec>("rate: 500\nrequests: []").unwrap_err();
    assert!(e.to_string().contains("not a rate"), "{e}");
    let e = serde_saphyr::from_str::<LoadSpec>(
        "rate: [ { at: 0s, rate: 5/s, speed: 1 } ]\nrequests: []",
    )
    .unwrap_err();
    assert!(e.to_string().contains("speed"), "{e}");
}

#[test]
fn validation_names_the_field_of_each_mistake() {
    let mut spec = LoadSpec::constant("10/s".parse().unwrap(), "/");
    type Breakage = Box<dyn Fn(&mut LoadSpec)>;
    let cases: Vec<(&str, Breakage)> = vec![
        (
            "load.rate[1].at",
            Box::new(|s| s.rate = segments("[{at: 5s, rate: 1/s}, {at: 2s, rate: 2/s}]")),
        ),
        (
            "load.rate[0].over",
            Box::new(|s| {
                s.rate = segments("[{at: 0s, ramp_to: 9/s, over: 5s}, {at: 2s, rate: 2/s}]")
            }),
        ),
        (
            "load.rate[0]",
            Box::new(|s| s.rate = segments("[{at: 0s, rate: 1/s, ramp_to: 9/s, over: 1s}]")),
        ),
        (
            "load.rate[0]",
            Box::new(|s| s.rate = segments("[{at: 0s, ramp_to: 9/s}]")),
        ),
        ("load.timeout", Box::new(|s| s.timeout = Dur::ZERO)),
        ("load.max_in_flight", Box::new(|s| s.max_in_flight = 0)),
        ("load.connections", Box::new(|s| s.connections = 0)),
        (
            "load.coalesce",
            Box::new(|s| s.coalesce = "10.5ms".parse().unwrap()),
        ),
        ("load.requests", Box::new(|s| s.requests.clear())),
        (
            "load.requests[0]",
            Box::new(|s| s.requests[0].post = Some("/x".into())),
        ),
        (
            "load.requests[0]",
            Box::new(|s| s.requests[0].get = Some("/p/{rand:9..1}".into())),
        ),
        (
            "load.requests[0]",
            Box::new(|s| s.requests[0].get = Some("no-slash".into())),
        ),
        (
            "load.requests[0].headers",
            Box::new(|s| {
                s.requests[0].headers.insert("bad name".into(), "v".into());
            }),
        ),
        (
            "load.fallback_status",
            Box::new(|s| s.fallback_status = vec![42]),
        ),
    ];
    for (field, break_it) in cases {
        let mut broken = spec.clone();
        break_it(&mut broken);
        let e = broken.validate().unwrap_err().to_string();
        assert!(e.contains(field), "expected {field} in {e}");
    }
    spec.requests[0].get = Some("/p/{seq}/{rand:1..1000}?q=1".into());
    spec.validate().unwrap();
}

fn segments(yaml: &str) -> Option<RateSpec> {
    Some(serde_saphyr::from_str(yaml).unwrap())
}

#[test]
fn scaling_time_multiplies_durations_and_divides_rates() {
    let mut spec: LoadSpec = serde_saphyr::from_str(CONTRACT_EXAMPLE).unwrap();
    spec.scale_time(0.1);
    assert_eq!(spec.timeout, "500ms".parse().unwrap());
    let Some(RateSpec::Segments(s)) = &spec.rate else {
        panic!("expected segments")
    };
    assert_eq!(s[0].rate.unwrap().per_sec(), 1000.0);
    assert_eq!(s[1].at, "1s".parse().unwrap());
    assert_eq!(s[1].ramp_to.unwrap().per_sec(), 5000.0);
    assert_eq!(s[1].over.unwrap(), "500ms".parse().unwrap());
    assert_eq!(s[2].at, "4s".parse().unwrap());
    assert_eq!(spec.max_in_flight, 10_000);
    assert_eq!(spec.connections, 1000);

    let mut constant = LoadSpec::constant("500/s".parse().unwrap(), "/");
    constant.timeout = "2s".parse().unwrap();
    constant.scale_time(0.1);
    assert_eq!(
        constant.rate,
        Some(RateSpec::Constant("5000/s".parse().unwrap()))
    );
    assert_eq!(constant.timeout, "200ms".parse().unwrap());
}
