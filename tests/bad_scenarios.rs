//! Bad scenarios, each a small edit of a good one: every one is refused with exit code 2 and a message that names
//! the file, the line and the field, and none panics.

use std::process::Command;

use faultline::scenario::{Overrides, Scenario};

const GOOD: &str = r#"name: table
description: a valid scenario that each case below breaks in one place
duration: 10s
seed: 1
dependency:
  routes:
    pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }
  phases:
    - { name: healthy, at: 0s }
    - { name: brownout, at: 4s, routes: { pricing: { latency: { fixed: 2s } } } }
sut:
  demo:
    operations:
      pricing: { timeout: 250ms, pool: 200, fallback: stale }
load:
  rate: 100/s
  timeout: 2s
  requests: [ { get: "/product/{rand:1..100}" } ]
  fallback_header: X-Fallback
breakers:
  pricing: { metrics: { preset: seed } }
expect:
  - { breaker: pricing, opens_within: 6s, after: brownout }
  - { dependency: pricing, max_in_flight_below: 200 }
"#;

/// What is wrong, the edit (from, to), words the message must contain, the line it must name.
type Case = (
    &'static str,
    (&'static str, &'static str),
    &'static [&'static str],
    usize,
);

const CASES: &[Case] = &[
    ("syntax error", ("duration: 10s", "duration: [10s"), &["duration"], 3),
    ("unknown top-level field", ("seed: 1", "seed: 1\nsede: 2"), &["sede", "did you mean `seed`?"], 5),
    ("unknown field in a route", ("latency: { p50: 40ms, p99: 80ms } }", "latency: { p50: 40ms, p99: 80ms }, latncy: 1 }"), &["dependency.routes.pricing.latncy", "did you mean `latency`?"], 7),
    ("duration without a unit", ("duration: 10s", "duration: 10"), &["needs a unit"], 3),
    ("duration with a space", ("duration: 10s", "duration: 5 sec"), &["contains a space"], 3),
    ("negative duration", ("duration: 10s", "duration: -10s"), &["negative"], 3),
    ("negative rate", ("rate: 100/s", "rate: -100/s"), &["negative"], 16),
    ("rate without a unit", ("rate: 100/s", "rate: 100"), &["rate"], 16),
    ("unknown rate unit", ("rate: 100/s", "rate: 100/day"), &["unknown unit"], 16),
    ("share over 100%", ("fallback: stale }", "fallback: stale, breaker: { failure_rate: 150% } }"), &["over 100%"], 14),
    ("expectation naming an unknown phase", ("after: brownout }", "after: brwnout }"), &["expect[0]", "brwnout"], 23),
    ("expectation naming an unknown breaker", ("{ breaker: pricing, opens_within", "{ breaker: prcing, opens_within"), &["expect[0]", "prcing"], 23),
    ("expectation naming an unknown route", ("{ dependency: pricing,", "{ dependency: pricng,"), &["expect[1]", "pricng"], 24),
    ("expectation without its phase", (", after: brownout }", " }"), &["expect[0]", "after"], 23),
    ("expectation with a wrong unit", ("max_in_flight_below: 200 }", "max_in_flight_below: 200 }\n  - { sut_latency: p99, below: 50 }"), &["expect[2]", "needs a unit"], 25),
    ("expectation with an unknown field", ("max_in_flight_below: 200 }", "max_in_flihgt_below: 200 }"), &["expect[1].max_in_flihgt_below", "did you mean `max_in_flight_below`?"], 24),
    ("missing SUT", ("sut:\n  demo:\n    operations:\n      pricing: { timeout: 250ms, pool: 200, fallback: stale }\n", "sut: {}\n"), &["sut", "service under test"], 11),
    ("a command SUT without a URL", ("sut:\n  demo:\n    operations:\n      pricing: { timeout: 250ms, pool: 200, fallback: stale }\n", "sut:\n  command: [ ./my-service ]\n"), &["sut.command", "url"], 12),
    ("a non-loopback SUT without an allow list", ("sut:\n  demo:\n    operations:\n      pricing: { timeout: 250ms, pool: 200, fallback: stale }\n", "sut:\n  url: http://10.1.2.3:8080\n"), &["10.1.2.3 is not a loopback address", "allow_hosts"], 12),
    ("a running SUT with an embedded faultd on a random port", ("sut:\n  demo:\n    operations:\n      pricing: { timeout: 250ms, pool: 200, fallback: stale }\n", "sut:\n  url: http://127.0.0.1:8080\n"), &["sut.url", "dependency.listen", "faultd: { control, url }"], 12),
    ("a resolver beside an external faultd", ("seed: 1\ndependency:\n", "seed: 1\nfaultd: { control: http://127.0.0.1:9001, url: http://127.0.0.1:9100 }\ndependency:\n  dns:\n    names: { pricing.internal: { a: [127.0.0.1] } }\n"), &["dependency.dns", "embedded faultd"], 7),
    ("dependency.listen beside an external faultd", ("seed: 1\ndependency:\n", "seed: 1\nfaultd: { control: http://127.0.0.1:9001, url: http://127.0.0.1:9100 }\ndependency:\n  listen: 127.0.0.1:9000\n"), &["dependency.listen", "faultd --listen"], 7),
    ("unmatched calls forwarded off loopback", ("seed: 1\ndependency:\n", "seed: 1\ndependency:\n  unmatched: { proxy: http://10.1.2.3:80 }\n"), &["dependency.unmatched.proxy", "10.1.2.3 is not a loopback address"], 6),
    ("unmatched calls answered with another status", ("seed: 1\ndependency:\n", "seed: 1\ndependency:\n  unmatched: 500\n"), &["dependency.unmatched", "give 404"], 6),
    ("a placeholder that does not exist", ("sut:\n  demo:\n    operations:\n      pricing: { timeout: 250ms, pool: 200, fallback: stale }\n", "sut:\n  command: [ ./svc, \"--dep={faultd.uri}\" ]\n  url: http://127.0.0.1:{sut.port}\n"), &["unknown placeholder {faultd.uri}"], 12),
    ("the run's CA without TLS", ("sut:\n  demo:\n    operations:\n      pricing: { timeout: 250ms, pool: 200, fallback: stale }\n", "sut:\n  command: [ ./svc, \"--ca={faultd.ca}\" ]\n  url: http://127.0.0.1:{sut.port}\n"), &["unknown placeholder {faultd.ca}"], 12),
    ("a phase naming an unknown route", ("routes: { pricing: { latency: { fixed: 2s } } } }", "routes: { prcing: { latency: { fixed: 2s } } } }"), &["prcing"], 10),
    ("no breaker source", ("{ metrics: { preset: seed } }", "{ route: pricing }"), &["at least one source"], 21),
    ("an unknown preset", ("preset: seed", "preset: hystrix"), &["hystrix"], 21),
    ("an unknown mistake switch", ("fallback: stale }\n", "fallback: stale }\n    mistakes: [ no_timout ]\n"), &["no_timout"], 15),
    ("an unset environment variable", ("seed: 1", "seed: ${FAULTLINE_TEST_NEVER_SET}"), &["FAULTLINE_TEST_NEVER_SET is not set"], 4),
    ("a demo Redis address with an unknown placeholder", ("operations:\n      pricing", "redis: \"{faultd.routes.cache.addr}\"\n    operations:\n      pricing"), &["sut.demo.redis", "unknown placeholder {faultd.routes.cache.addr}"], 13),
    ("a faultd replica that is not loopback", ("seed: 1", "seed: 1\nfaultd:\n  url: http://127.0.0.1:9100\n  replicas: [http://127.0.0.1:9101, http://10.0.0.7:9102]"), &["faultd.replicas[1]", "10.0.0.7 is not a loopback address"], 7),
    ("a faultd replica named twice", ("seed: 1", "seed: 1\nfaultd:\n  url: http://127.0.0.1:9100\n  replicas:\n    - http://127.0.0.1:9101\n    - http://127.0.0.1:9101"), &["faultd.replicas[1]", "named twice"], 9),
    ("faultd control and replicas both", ("seed: 1", "seed: 1\nfaultd: { control: http://127.0.0.1:9001, url: http://127.0.0.1:9100, replicas: [http://127.0.0.1:9101] }"), &["faultd.replicas", "not both"], 5),
    ("an external faultd without a control API", ("seed: 1", "seed: 1\nfaultd: { url: http://127.0.0.1:9100 }"), &["faultd", "`control: URL`"], 5),
    ("a rate of zero", ("rate: 100/s", "rate: 0/s"), &["load.rate", "0/s sends no request"], 16),
    ("a rate of zero in every segment", ("rate: 100/s", "rate: [ { at: 0s, rate: 0/s }, { at: 2s, ramp_to: 0/s, over: 1s } ]"), &["load.rate", "0/s sends no request"], 16),
    ("an expectation with two checks", ("after: brownout }", "after: brownout, stays_closed: true }"), &["expect[0]", "one check", "`opens_within` and `stays_closed`"], 23),
    ("a phase an opening check ignores", ("after: brownout }", "after: brownout, during: healthy }"), &["expect[0]", "`during` does not apply to `opens_within`", "counts from the start of the phase named by `after`"], 23),
    ("a field a bound on calls in flight ignores", ("max_in_flight_below: 200 }", "max_in_flight_below: 200, after: brownout }"), &["expect[1]", "`after` does not apply to `max_in_flight_below`"], 24),
    ("a misspelt key far from any", ("seed: 1", "seed: 1\ncolour: red"), &["unknown key `colour`; expected one of", "duration"], 5),
    ("a key given twice", ("seed: 1", "seed: 1\nseed: 2"), &["seed", "given twice"], 5),
    ("an unknown outcome class", ("max_in_flight_below: 200 }", "max_in_flight_below: 200 }\n  - { sut_share: fallbak, above: 5% }"), &["expect[2]", "fallbak"], 25),
];

fn edit(case: &Case) -> String {
    let (name, (from, to), _, _) = case;
    assert!(
        GOOD.contains(from),
        "case {name:?}: {from:?} is not in the good scenario"
    );
    GOOD.replacen(from, to, 1)
}

#[test]
fn the_good_scenario_is_valid() {
    let v = Scenario::parse(GOOD, "table.yaml", &Overrides::default()).unwrap();
    assert_eq!(v.expectations.len(), 2);
}

#[test]
fn an_external_faultd_is_one_control_api_or_several_replicas_behind_one_url() {
    let one = GOOD.replacen(
        "seed: 1",
        "seed: 1\nfaultd: { control: http://127.0.0.1:9001, url: http://127.0.0.1:9000 }",
        1,
    );
    let v = Scenario::parse(&one, "table.yaml", &Overrides::default()).unwrap();
    assert_eq!(
        v.scenario.faultd.unwrap().controls(),
        vec!["http://127.0.0.1:9001"]
    );
    let several = GOOD.replacen(
        "seed: 1",
        "seed: 1\nfaultd:\n  url: http://127.0.0.1:9100\n  replicas: [http://127.0.0.1:9101, \"http://[::1]:9102\"]",
        1,
    );
    let v = Scenario::parse(&several, "table.yaml", &Overrides::default()).unwrap();
    let f = v.scenario.faultd.unwrap();
    assert_eq!(
        f.controls(),
        vec!["http://127.0.0.1:9101", "http://[::1]:9102"]
    );
    assert_eq!(f.url, "http://127.0.0.1:9100");
    // A replica elsewhere is allowed when the scenario lists its host.
    let allowed = several.replacen("http://[::1]:9102", "http://faultd-1.faultd.svc:9102", 1)
        + "allow_hosts: [faultd-1.faultd.svc]\n";
    assert!(Scenario::parse(&allowed, "table.yaml", &Overrides::default()).is_ok());
    // `faultline schema` describes both forms.
    let schema = faultline::scenario::json_schema().to_string();
    assert!(
        schema.contains("The control APIs of several faultd replicas"),
        "{schema}"
    );
}

#[test]
fn every_bad_scenario_is_refused_with_its_line_and_field() {
    assert!(CASES.len() >= 20);
    let mut failures = Vec::new();
    for case in CASES {
        let (name, _, words, line) = case;
        let text = edit(case);
        let message = match std::panic::catch_unwind(|| {
            Scenario::parse(&text, "table.yaml", &Overrides::default())
        }) {
            Err(_) => {
                failures.push(format!("{name}: PANICKED"));
                continue;
            }
            Ok(Ok(_)) => {
                failures.push(format!("{name}: accepted"));
                continue;
            }
            Ok(Err(e)) => e.to_string(),
        };
        for w in *words {
            if !message.contains(w) {
                failures.push(format!("{name}: message lacks {w:?}: {message}"));
            }
        }
        // One form everywhere: `file:line:column: field: message`, in the scenario's words, not a library's.
        for w in ["DuplicateKeyPolicy", "Options", "<input>", " at line "] {
            if message.contains(w) {
                failures.push(format!(
                    "{name}: message has the reader's wording {w:?}: {message}"
                ));
            }
        }
        // One slip, one error: no error that only follows from another. A running SUT off loopback is two slips
        // in one edit: the host, and a service that cannot learn the embedded faultd's port.
        let slips = if *name == "a non-loopback SUT without an allow list" {
            2
        } else {
            1
        };
        if message.lines().count() != slips {
            failures.push(format!(
                "{name}: more than one error for one slip: {message}"
            ));
        }
        let names_line = message.starts_with(&format!("table.yaml:{line}:"));
        if !names_line {
            failures.push(format!(
                "{name}: message does not name table.yaml line {line}: {message}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases wrong:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
fn validate_and_run_read_a_scenario_from_standard_input_as_dash() {
    let faultline = std::path::Path::new(env!("CARGO_BIN_EXE_faultline"));
    let with_stdin =
        |args: &[&str], text: &str| crate::hardening::with_stdin(faultline, args, text.as_bytes());
    let out = with_stdin(&["validate", "-"], GOOD);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "-: ok (2 expectations, 2 phases)\n"
    );
    // A mistake is placed in standard input's text, with its line shown.
    for args in [&["validate", "-"][..], &["run", "-"][..]] {
        let out = with_stdin(args, &GOOD.replace("duration: 10s", "duration: 5 sec"));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("-:3:11: duration: ") && err.contains(" 3 | duration: 5 sec"),
            "{err}"
        );
    }
}

#[test]
fn validate_and_list_print_json_for_tools() {
    let dir = std::env::temp_dir().join(format!("faultline-json-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.yaml");
    let bad = dir.join("bad.yaml");
    std::fs::write(&good, GOOD).unwrap();
    std::fs::write(
        &bad,
        GOOD.replace("duration: 10s", "duration: 5 sec")
            .replace("opens_within: 6s", "opens_withn: 6s"),
    )
    .unwrap();
    let json = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
            .args(args)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        (out.status.code(), v)
    };
    let (code, v) = json(&[
        "validate",
        "--json",
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2));
    assert_eq!(v[0]["valid"], true);
    assert_eq!(v[0]["name"], "table");
    assert_eq!(
        (v[0]["expectations"].as_u64(), v[0]["phases"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(v[1]["valid"], false);
    let errors = v[1]["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(
        (errors[0]["line"].as_u64(), errors[0]["column"].as_u64()),
        (Some(3), Some(11))
    );
    assert_eq!(errors[0]["field"], "duration");
    assert!(
        errors[1]["message"]
            .as_str()
            .unwrap()
            .contains("opens_within"),
        "{errors:?}"
    );

    let (code, v) = json(&["list", "--json", dir.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(v[0]["error"].as_str().unwrap().contains("5 sec"), "{v}");
    assert_eq!(v[1]["name"], "table");
    assert_eq!(v[1]["duration_s"].as_f64(), Some(10.0));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_cli_exits_2_on_a_bad_scenario_and_names_the_file() {
    let dir = std::env::temp_dir().join(format!("faultline-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.yaml");
    std::fs::write(&path, GOOD.replace("duration: 10s", "duration: 5 sec")).unwrap();
    for args in [vec!["validate"], vec!["run"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
            .args(&args)
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("bad.yaml:3:11: duration: ")
                && err.contains("5 sec")
                && err.contains(" 3 | duration: 5 sec"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(["run", "--time-scale", "banana", "x.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn every_error_of_a_file_is_listed_in_line_order_up_to_twenty() {
    // Three slips the reader meets: an unknown key in a flow mapping, a value that is not a duration, an unknown
    // key in a list item; all three are said, each at its line.
    let slips = GOOD
        .replace(
            "latency: { p50: 40ms, p99: 80ms }",
            "latncy: { p50: 40ms, p99: 80ms }",
        )
        .replace("timeout: 2s", "timeout: 2x")
        .replace("max_in_flight_below: 200 }", "max_in_flihgt_below: 200 }");
    let e = Scenario::parse(&slips, "table.yaml", &Overrides::default()).unwrap_err();
    let said = e.to_string();
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 3, "{said}");
    assert!(lines[0].starts_with("table.yaml:7:32: dependency.routes.pricing.latncy: unknown key `latncy`; did you mean `latency`?"), "{said}");
    assert!(
        lines[1].starts_with("table.yaml:17:12: load.timeout: \"2x\" is not a duration"),
        "{said}"
    );
    assert!(
        lines[2].starts_with("table.yaml:24:28: expect[1].max_in_flihgt_below: unknown key"),
        "{said}"
    );
    assert!(e.render().ends_with("\n3 errors"), "{}", e.render());

    // Three slips only the whole scenario shows: each is said.
    let slips = GOOD
        .replace("duration: 10s", "duration: 0s")
        .replace("rate: 100/s", "rate: 0/s")
        .replace("after: brownout }", "after: brownot }");
    let said = Scenario::parse(&slips, "table.yaml", &Overrides::default())
        .unwrap_err()
        .to_string();
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 3, "{said}");
    assert!(lines[0].starts_with("table.yaml:3:1: duration: "), "{said}");
    assert!(
        lines[1].starts_with("table.yaml:16:3: load.rate: "),
        "{said}"
    );
    assert!(
        lines[2].starts_with("table.yaml:23:5: expect[0]: ") && lines[2].contains("brownot"),
        "{said}"
    );

    // Twenty-five unknown keys: the first twenty are said, and how many there were.
    let keys: String = (0..25).map(|i| format!("\nx{i}: 1")).collect();
    let many = GOOD.replacen("seed: 1", &format!("seed: 1{keys}"), 1);
    let e = Scenario::parse(&many, "table.yaml", &Overrides::default()).unwrap_err();
    assert_eq!(e.to_string().lines().count(), 20, "{}", e.render());
    assert!(
        e.render().ends_with("\n25 errors; the first 20 are shown"),
        "{}",
        e.render()
    );
}

#[test]
fn a_dependency_over_faultds_limits_is_refused_naming_the_field_and_the_limit() {
    let errors = vec!["{ share: 1%, status: 503 }"; faultd::limits::MAX_ENTRIES + 1].join(", ");
    let many_errors = GOOD.replacen(
        "latency: { p50: 40ms, p99: 80ms } }",
        &format!("latency: {{ p50: 40ms, p99: 80ms }}, errors: [ {errors} ] }}"),
        1,
    );
    let routes: String = (0..faultd::limits::MAX_ROUTES)
        .map(|i| format!("\n    r{i}: {{ path: /r{i} }}"))
        .collect();
    let many_routes = GOOD.replacen("  routes:", &format!("  routes:{routes}"), 1);
    for (text, words) in [
        (
            many_errors,
            [
                "table.yaml:7:",
                "dependency.routes.pricing.errors",
                "101 entries, over faultd's limit of 100",
            ],
        ),
        (
            many_routes,
            [
                "table.yaml:6:",
                "dependency.routes",
                "1001 routes, over faultd's limit of 1000",
            ],
        ),
    ] {
        let message = Scenario::parse(&text, "table.yaml", &Overrides::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        for w in words {
            assert!(message.contains(w), "{w:?} not in {message:?}");
        }
    }
}

#[test]
fn a_tcp_route_with_instances_gives_addresses_and_takes_instance_expectations() {
    let with = |command: &str, expect: &str| {
        GOOD.replacen(
            "    pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }\n",
            "    pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }\n    cache: { tcp: { upstream: 127.0.0.1:6379 }, instances: 2 }\n",
            1,
        )
        .replacen(
            "    - { name: brownout, at: 4s, routes: { pricing: { latency: { fixed: 2s } } } }\n",
            "    - { name: brownout, at: 4s, routes: { pricing: { latency: { fixed: 2s } }, cache: { instance: 2, toxics: [ { type: latency, attributes: { latency: 500 } } ] } } }\n",
            1,
        )
        .replacen(
            "sut:\n  demo:\n    operations:\n      pricing: { timeout: 250ms, pool: 200, fallback: stale }\n",
            &format!("sut:\n  command: [ ./my-service, {command} ]\n  url: \"http://127.0.0.1:{{sut.port}}\"\n"),
            1,
        )
        .replacen(
            "  - { dependency: pricing, max_in_flight_below: 200 }\n",
            &format!("  - {expect}\n"),
            1,
        )
    };
    let ejected =
        "{ dependency: cache, instance: 2, ejected_within: 2s, after: brownout, share_below: 5% }";
    let good = with(
        "\"--replicas={faultd.routes.cache.instances}\", \"--slow={faultd.routes.cache.instance.2.addr}\"",
        ejected,
    );
    if let Err(e) = Scenario::parse(&good, "table.yaml", &Overrides::default()) {
        panic!("{e}");
    }
    let url = with("\"{faultd.routes.cache.instance.2.url}\"", ejected);
    let err = Scenario::parse(&url, "table.yaml", &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("faultd.routes.cache.instance.2.url"),
        "a TCP instance has no URL: {err}"
    );
    let third = with(
        "\"{faultd.routes.cache.instance.1.port}\"",
        &ejected.replace("instance: 2", "instance: 3"),
    );
    let err = Scenario::parse(&third, "table.yaml", &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("route cache has 2 instances"), "{err}");
}
