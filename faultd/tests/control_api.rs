//! The control API over loopback: bearer token, 400s that name the field, run-time changes, the schedule, the
//! recording and /metrics.

use crate::common;

use std::net::SocketAddr;

use common::{call, get, Reply};
use faultd::{Config, Options, Recording};

const TOKEN: &str = "s3cret";
const AUTH: (&str, &str) = ("authorization", "Bearer s3cret");

async fn start() -> faultd::Faultd {
    let config = Config::from_yaml(
        "seed: 1\nroutes:\n  pricing: { path: /price/* }\nphases:\n  - { name: healthy, at: 0s }\n  - { name: brownout, at: 1h, routes: { pricing: { errors: [ { share: 100%, status: 503 } ] } } }\n",
        "control.yaml",
    )
    .unwrap();
    let options = Options {
        control: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        token: Some(TOKEN.to_string()),
        ..Options::default()
    };
    faultd::start(config, options).await.unwrap()
}

fn json(reply: &Reply) -> serde_json::Value {
    serde_json::from_slice(reply.body())
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(reply.body())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_without_the_bearer_token_are_refused() {
    let f = start().await;
    let control = f.control_addr().unwrap();
    assert_eq!(get(control, "/schedule").await.status(), Some(401));
    assert_eq!(
        call(
            control,
            "GET",
            "/schedule",
            &[("authorization", "Bearer wrong")],
            b""
        )
        .await
        .status(),
        Some(401)
    );
    assert_eq!(
        call(control, "GET", "/schedule", &[AUTH], b"")
            .await
            .status(),
        Some(200)
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_get_400_naming_the_field() {
    let f = start().await;
    let control = f.control_addr().unwrap();
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "/routes/pricing",
            r#"{"latency": {"fixed": "5 sec"}}"#,
            "latency.fixed",
            "is not a duration",
        ),
        (
            "/routes/pricing",
            r#"{"latncy": {}}"#,
            "latncy",
            "unknown field",
        ),
        (
            "/routes/pricing",
            r#"{"hang": "60%", "reset": "60%"}"#,
            "routes.pricing",
            "over 100%",
        ),
        (
            "/routes/pricing",
            r#"{"errors": [{"share": "10%", "status": 42}]}"#,
            "routes.pricing.errors[0].status",
            "final HTTP status",
        ),
        ("/routes/pricing", r#"{"latency": "#, "latency", "EOF"),
        (
            "/routes/pricing",
            r#"{"matched": [{"match": {"header": {"x-tenant": "["}}}]}"#,
            "routes.pricing.matched[0].match.header.x-tenant",
            "not a regular expression",
        ),
        (
            "/config",
            r#"{"routes": {"p": {"path": "/p", "latency": {"fixed": "-1s"}}}}"#,
            "routes.p.latency.fixed",
            "negative",
        ),
        (
            "/config",
            r#"{"routes": {"p": {"path": "/p"}}, "phases": [{"name": "a", "at": "0s", "routes": {"q": "healthy"}}]}"#,
            "phases[0].routes.q",
            "no route named",
        ),
    ];
    for (path, body, field, phrase) in cases {
        let reply = call(
            control,
            "PUT",
            path,
            &[AUTH, ("content-type", "application/json")],
            body.as_bytes(),
        )
        .await;
        assert_eq!(
            reply.status(),
            Some(400),
            "{path} {body}: {:?}",
            String::from_utf8_lossy(reply.body())
        );
        let problem = json(&reply);
        assert_eq!(
            problem["field"].as_str().unwrap_or(""),
            *field,
            "{body}: {problem}"
        );
        assert!(
            problem["error"].as_str().unwrap().contains(phrase),
            "{body}: {problem}"
        );
    }
    let unknown = call(control, "PUT", "/routes/nope", &[AUTH], b"\"healthy\"").await;
    assert_eq!(unknown.status(), Some(404));
    // Nothing bad was applied: the data plane still answers 200.
    assert_eq!(get(f.data_addr(), "/price/1").await.status(), Some(200));
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_can_be_changed_and_the_schedule_driven_at_run_time() {
    let f = start().await;
    let control = f.control_addr().unwrap();
    let schedule = json(&call(control, "GET", "/schedule", &[AUTH], b"").await);
    assert_eq!(schedule["state"], "not-started");
    assert_eq!(
        call(control, "POST", "/schedule/start", &[AUTH], b"")
            .await
            .status(),
        Some(204)
    );
    let schedule = json(&call(control, "GET", "/schedule", &[AUTH], b"").await);
    assert_eq!(schedule["state"], "running");
    assert_eq!(schedule["phase"], "healthy");
    assert!(schedule["schedule_started_unix_ms"].as_u64().unwrap() > 1_600_000_000_000);

    let set = br#"{"errors": [{"share": "100%", "status": 429, "headers": {"retry-after": "3"}}]}"#;
    assert_eq!(
        call(control, "PUT", "/routes/pricing", &[AUTH], set)
            .await
            .status(),
        Some(204)
    );
    let reply = get(f.data_addr(), "/price/1").await;
    assert_eq!(
        (reply.status(), reply.header("retry-after").as_deref()),
        (Some(429), Some("3"))
    );

    assert_eq!(
        call(control, "POST", "/schedule/reset", &[AUTH], b"")
            .await
            .status(),
        Some(204)
    );
    assert_eq!(get(f.data_addr(), "/price/1").await.status(), Some(200));
    assert_eq!(f.current_phase().as_deref(), Some(faultd::HEALTHY_RESET));

    let recording: Recording = serde_json::from_slice(
        call(control, "GET", "/recording", &[AUTH], b"")
            .await
            .body(),
    )
    .unwrap();
    let totals = &recording.routes["pricing"].totals;
    assert_eq!(
        (
            totals.arrivals,
            totals.completed.c4xx,
            totals.completed.c2xx
        ),
        (2, 1, 1)
    );
    let entered: Vec<_> = recording
        .phases_entered
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(entered, ["healthy", faultd::HEALTHY_RESET]);

    let metrics = call(control, "GET", "/metrics", &[AUTH], b"").await;
    let text = String::from_utf8_lossy(metrics.body());
    assert!(
        text.contains("faultd_arrivals_total{route=\"pricing\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("faultd_max_in_flight{route=\"pricing\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("faultd_completed_total{route=\"pricing\",class=\"4xx\"} 1"),
        "{text}"
    );

    let config = br#"{"routes": {"pricing": {"path": "/price/*", "errors": [{"share": "100%", "status": 500}]}}}"#;
    assert_eq!(
        call(control, "PUT", "/config", &[AUTH], config)
            .await
            .status(),
        Some(204)
    );
    let got = json(&call(control, "GET", "/config", &[AUTH], b"").await);
    assert_eq!(got["routes"]["pricing"]["errors"][0]["status"], 500);
    f.shutdown().await;
}

#[tokio::test]
async fn errors_axum_gives_by_itself_answer_json_with_the_documented_fields() {
    let f = start().await;
    let addr = f.control_addr().unwrap();
    let too_large = vec![b' '; 3 << 20];
    for (method, path, body, status) in [
        ("GET", "/no/such/path", &b""[..], 404),
        ("DELETE", "/config", &b""[..], 405),
        ("PUT", "/config", &too_large[..], 413),
    ] {
        let reply = call(addr, method, path, &[AUTH], body).await;
        assert_eq!(reply.status(), Some(status), "{method} {path}");
        assert_eq!(
            reply.header("content-type").as_deref(),
            Some("application/json"),
            "{method} {path}"
        );
        let error = json(&reply)["error"].as_str().unwrap().to_string();
        assert!(error.starts_with(&format!("{method} {path}: ")), "{error}");
    }
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matched_entry_set_at_run_time_takes_its_calls_and_the_recording_and_metrics_count_them()
{
    let f = start().await;
    let control = f.control_addr().unwrap();
    let set = br#"{"matched": [{"name": "acme", "match": {"header": {"x-tenant": "^acme$"}}, "errors": [{"share": "100%", "status": 503}]}]}"#;
    let reply = call(control, "PUT", "/routes/pricing", &[AUTH], set).await;
    assert_eq!(reply.status(), Some(204));
    let acme = [("x-tenant", "acme")];
    let statuses = [
        call(f.data_addr(), "GET", "/price/1", &acme, b"")
            .await
            .status(),
        get(f.data_addr(), "/price/1").await.status(),
        call(f.data_addr(), "GET", "/price/2", &acme, b"")
            .await
            .status(),
    ];
    assert_eq!(statuses, [Some(503), Some(200), Some(503)]);
    let recording = json(&call(control, "GET", "/recording", &[AUTH], b"").await);
    assert_eq!(
        recording["routes"]["pricing"]["matched"]["acme"],
        serde_json::json!({"matched": 2, "taken": 2})
    );
    let metrics = call(control, "GET", "/metrics", &[AUTH], b"").await;
    let text = String::from_utf8_lossy(metrics.body());
    for line in [
        r#"faultd_matched_calls_total{route="pricing",entry="acme"} 2"#,
        r#"faultd_matched_taken_total{route="pricing",entry="acme"} 2"#,
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from {text}"
        );
    }
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_read_since_a_bucket_starts_its_series_there_with_the_whole_runs_totals() {
    let f = start().await;
    let control = f.control_addr().unwrap();
    f.start_schedule(tokio::time::Instant::now());
    // Calls spread over about a second: a dozen buckets of 100 ms.
    for _ in 0..12 {
        assert_eq!(get(f.data_addr(), "/price/1").await.status(), Some(200));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let whole = json(&call(control, "GET", "/recording", &[AUTH], b"").await);
    let since = json(&call(control, "GET", "/recording?since=5", &[AUTH], b"").await);
    let buckets = |r: &serde_json::Value| {
        r["routes"]["pricing"]["buckets"]
            .as_array()
            .unwrap()
            .clone()
    };
    let (all, cut) = (buckets(&whole), buckets(&since));
    assert!(all.len() >= 12, "{} buckets", all.len());
    // The second read came a moment later and may hold a bucket more; the settled ones are the same.
    assert!(cut.len() >= all.len() - 5, "{} of {}", cut.len(), all.len());
    let settled = all.len() - 5 - 2;
    assert_eq!(cut[..settled], all[5..5 + settled]);
    assert_eq!(
        since["routes"]["pricing"]["totals"]["arrivals"],
        whole["routes"]["pricing"]["totals"]["arrivals"]
    );
    assert_eq!(whole["routes"]["pricing"]["totals"]["arrivals"], 12);
    let connections = |r: &serde_json::Value| r["connections"].as_array().unwrap().len();
    assert!(connections(&since) + 5 >= connections(&whole));
    let bad = call(control, "GET", "/recording?since=soon", &[AUTH], b"").await;
    assert_eq!(bad.status(), Some(400));
    f.shutdown().await;
}
