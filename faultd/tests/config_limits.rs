//! faultd's limits on what one configuration may hold, the same through a file, the control API and the
//! Toxiproxy API; and a recording whose size follows the routes that saw traffic, not the routes configured.

use crate::common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::{call, Reply};
use faultd::limits::{MAX_ENTRIES, MAX_PHASES, MAX_ROUTES, MAX_SCHEDULE_CELLS};
use serde_json::{json, Map, Value};

/// Sends `body` as JSON with `method` to `path`.
async fn send_json(addr: SocketAddr, method: &str, path: &str, body: &Value) -> Reply {
    call(
        addr,
        method,
        path,
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
    .await
}

fn json_of(reply: &Reply) -> Value {
    serde_json::from_slice(reply.body())
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(reply.body())))
}

async fn start(config: &str) -> faultd::Faultd {
    let config = faultd::Config::from_yaml(config, "limits.yaml").unwrap();
    let options = faultd::Options {
        control: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        toxiproxy_api: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        ..faultd::Options::default()
    };
    faultd::start(config, options).await.unwrap()
}

/// Asserts a refusal with `status` whose error names `needles` (and, on the control API, `field`).
fn refused(reply: &Reply, status: u16, field: Option<&str>, needles: &[&str]) {
    assert_eq!(
        reply.status(),
        Some(status),
        "{:?}",
        String::from_utf8_lossy(reply.body())
    );
    let problem = json_of(reply);
    if let Some(field) = field {
        assert_eq!(problem["field"].as_str().unwrap_or(""), field, "{problem}");
    }
    let error = problem["error"].as_str().unwrap_or_default();
    for n in needles {
        assert!(error.contains(n), "{n:?} not in {problem}");
    }
}

/// `n` HTTP routes `r0`, `r1`, ... as JSON.
fn routes(n: usize) -> Map<String, Value> {
    (0..n)
        .map(|i| (format!("r{i}"), json!({ "path": format!("/r{i}") })))
        .collect()
}

/// `n` phases one second apart, each sending route `r0` back to healthy.
fn phases(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({ "name": format!("p{i}"), "at": format!("{i}s"), "routes": { "r0": "healthy" } }))
        .collect()
}

/// `n` phases one second apart, each giving `route` a latency over its base.
fn phases_on(route: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({ "name": format!("p{i}"), "at": format!("{i}s"), "routes": { route: { "latency": { "fixed": "1ms" } } } }))
        .collect()
}

/// `n` header names, each with a one-letter value.
fn headers(n: usize) -> Map<String, Value> {
    (0..n).map(|i| (format!("h{i}"), json!("v"))).collect()
}

/// `n` error answers of 1% each.
fn errors(n: usize) -> Vec<Value> {
    (0..n)
        .map(|_| json!({ "share": "1%", "status": 503 }))
        .collect()
}

#[test]
fn a_file_over_a_limit_is_refused_with_exit_2_naming_the_file_the_field_and_the_limit() {
    let dir = std::env::temp_dir().join(format!("faultd-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let many_routes: String = (0..=MAX_ROUTES)
        .map(|i| format!("  r{i}: {{ path: /r{i} }}\n"))
        .collect();
    let many_errors = format!(
        "{{ path: /p, errors: {} }}",
        Value::from(errors(MAX_ENTRIES + 1))
    );
    let big_body = "x".repeat(3 << 20);
    let cases = [
        (
            "routes.yaml",
            format!("routes:\n{many_routes}"),
            vec!["routes: 1001 routes", "limit of 1000"],
        ),
        (
            "errors.yaml",
            format!("routes:\n  p: {many_errors}\n"),
            vec!["errors.yaml:2:", "routes.p.errors: 101 entries", "limit of 100"],
        ),
        (
            "bytes.yaml",
            format!("routes:\n  p: {{ path: /p, errors: [ {{ share: 1%, status: 503, body: {big_body} }} ] }}\n"),
            vec!["bytes as JSON", "limit of 2097152 bytes"],
        ),
    ];
    for (name, text, needles) in cases {
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_faultd"))
            .arg("validate")
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(name),
            "{name}: the file is not named: {stderr}"
        );
        for n in needles {
            assert!(stderr.contains(n), "{n:?} not in: {stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_config_over_a_limit_is_refused_with_400_naming_the_field_and_the_limit() {
    let f = start("routes:\n  pricing: { path: /price/* }\n").await;
    let control = f.control_addr().unwrap();
    // 700 routes of 100 response headers and an error with 100 more: each list at its limit, ~1.4 MB of JSON, and
    // 284,000 values in all.
    let wide: Map<String, Value> = (0..700)
        .map(|i| {
            let error = json!({ "share": "1%", "status": 503, "headers": headers(MAX_ENTRIES) });
            let route = json!({ "path": format!("/r{i}"), "response": { "headers": headers(MAX_ENTRIES) }, "errors": [error] });
            (format!("r{i}"), route)
        })
        .collect();
    let cases = [
        (
            json!({ "routes": routes(MAX_ROUTES + 1) }),
            "routes",
            "1001 routes, over faultd's limit of 1000",
        ),
        (
            json!({ "routes": routes(1), "phases": phases(MAX_PHASES + 1) }),
            "phases",
            "10001 phases, over faultd's limit of 10000",
        ),
        (
            json!({ "routes": routes(MAX_ROUTES), "phases": phases(MAX_SCHEDULE_CELLS / MAX_ROUTES + 1) }),
            "phases",
            "1001 phases x 1000 routes = 1001000 behaviours in the schedule, over faultd's limit of 1000000",
        ),
        (
            json!({ "routes": { "p": { "path": "/p", "response": { "headers": headers(MAX_ENTRIES + 1) } } } }),
            "routes.p.response.headers",
            "101 entries, over faultd's limit of 100",
        ),
        (
            json!({ "routes": { "p": { "path": "/p" } }, "phases": [ { "name": "a", "at": "0s", "routes": { "p": { "errors": errors(MAX_ENTRIES + 1) } } } ] }),
            "phases[0].routes.p.errors",
            "101 entries, over faultd's limit of 100",
        ),
        (
            json!({ "routes": wide }),
            "",
            "more than 250000 values",
        ),
        (
            // Each phase that touches the route builds its 64 MiB body again.
            json!({ "routes": { "p": { "path": "/p", "response": { "body_size": "64MiB" } } }, "phases": phases_on("p", 4) }),
            "phases[3].routes.p",
            "healthy bodies of 320 MiB in all, over faultd's limit of 256 MiB",
        ),
        (
            // A matched entry with a response of its own builds its body too.
            json!({ "routes": { "p": { "path": "/p", "matched": (0..5).map(|i| json!({ "name": format!("e{i}"), "response": { "body_size": "64MiB" } })).collect::<Vec<_>>() } } }),
            "routes.p.matched",
            "healthy bodies of 320 MiB in all, over faultd's limit of 256 MiB",
        ),
    ];
    for (body, field, phrase) in cases {
        let reply = send_json(control, "PUT", "/config", &body).await;
        refused(&reply, 400, Some(field), &[phrase]);
    }
    // Nothing was applied: the configuration is still the one route.
    let config = json_of(&call(control, "GET", "/config", &[], b"").await);
    assert_eq!(
        config["routes"].as_object().map(Map::len),
        Some(1),
        "{config}"
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_at_every_limit_is_accepted() {
    let f = start("routes:\n  pricing: { path: /price/* }\n").await;
    let control = f.control_addr().unwrap();
    // The most routes with as many phases as the schedule then holds, and the most phases with as many routes;
    // one route with every list at its limit.
    let most_routes = (MAX_ROUTES, MAX_SCHEDULE_CELLS / MAX_ROUTES);
    let most_phases = (MAX_SCHEDULE_CELLS / MAX_PHASES, MAX_PHASES);
    for (n_routes, n_phases) in [most_routes, most_phases] {
        let mut all = routes(n_routes);
        all.insert(
            "r0".into(),
            json!({ "path": "/r0", "response": { "headers": headers(MAX_ENTRIES) }, "errors": errors(MAX_ENTRIES) }),
        );
        let body = json!({ "routes": all, "phases": phases(n_phases) });
        let reply = send_json(control, "PUT", "/config", &body).await;
        assert_eq!(
            reply.status(),
            Some(204),
            "{n_routes} routes, {n_phases} phases: {:?}",
            String::from_utf8_lossy(reply.body())
        );
        let config = json_of(&call(control, "GET", "/config", &[], b"").await);
        assert_eq!(config["routes"].as_object().map(Map::len), Some(n_routes));
        assert_eq!(config["phases"].as_array().map(Vec::len), Some(n_phases));
    }
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_route_over_the_entry_limit_is_refused_naming_the_field_and_at_the_limit_accepted() {
    let f = start("routes:\n  pricing: { path: /price/* }\n").await;
    let control = f.control_addr().unwrap();
    let over = send_json(
        control,
        "PUT",
        "/routes/pricing",
        &json!({ "errors": errors(MAX_ENTRIES + 1) }),
    )
    .await;
    refused(
        &over,
        400,
        Some("routes.pricing.errors"),
        &["101 entries, over faultd's limit of 100"],
    );
    let at = send_json(
        control,
        "PUT",
        "/routes/pricing",
        &json!({ "errors": errors(MAX_ENTRIES) }),
    )
    .await;
    assert_eq!(
        at.status(),
        Some(204),
        "{:?}",
        String::from_utf8_lossy(at.body())
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_toxiproxy_api_refuses_proxies_and_toxics_over_the_limit() {
    let f = start("routes:\n  any: { path: /* }\n").await;
    let api = f.toxiproxy_addr().unwrap();
    // Nothing listens on the upstream: no connection is made, the proxies only have to exist.
    let proxies = |n: usize| -> Value {
        (0..n)
            .map(|i| json!({ "name": format!("db{i}"), "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9" }))
            .collect()
    };
    let over = send_json(api, "POST", "/populate", &proxies(MAX_ROUTES + 1)).await;
    refused(
        &over,
        400,
        None,
        &["proxies", "over faultd's limit of 1000"],
    );
    let list = json_of(&call(api, "GET", "/proxies", &[], b"").await);
    assert_eq!(
        list.as_object().map(Map::len),
        Some(0),
        "a refused populate left proxies"
    );

    let at = send_json(api, "POST", "/populate", &proxies(MAX_ROUTES)).await;
    assert_eq!(
        at.status(),
        Some(201),
        "{:?}",
        String::from_utf8_lossy(at.body())
    );
    let one_more = send_json(
        api,
        "POST",
        "/proxies",
        &json!({ "name": "extra", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9" }),
    )
    .await;
    refused(
        &one_more,
        400,
        None,
        &["1001 proxies, over faultd's limit of 1000"],
    );

    for i in 0..MAX_ENTRIES {
        let toxic =
            json!({ "name": format!("t{i}"), "type": "latency", "attributes": { "latency": 1 } });
        let added = send_json(api, "POST", "/proxies/db0/toxics", &toxic).await;
        assert_eq!(
            added.status(),
            Some(200),
            "{:?}",
            String::from_utf8_lossy(added.body())
        );
    }
    let toxic = json!({ "name": "t100", "type": "latency", "attributes": { "latency": 1 } });
    let over = send_json(api, "POST", "/proxies/db0/toxics", &toxic).await;
    refused(
        &over,
        400,
        None,
        &["101 toxics, over faultd's limit of 100"],
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recording_of_500_idle_routes_stays_small_as_buckets_elapse() {
    let mut yaml = String::from("routes:\n");
    for i in 0..450 {
        yaml.push_str(&format!("  r{i}: {{ path: /r{i} }}\n"));
    }
    for i in 0..50 {
        yaml.push_str(&format!(
            "  db{i}: {{ tcp: {{ listen: 127.0.0.1:0, upstream: 127.0.0.1:9 }} }}\n"
        ));
    }
    let f = start(&yaml).await;
    let control = f.control_addr().unwrap();
    let started = call(control, "POST", "/schedule/start", &[], b"").await;
    assert_eq!(started.status(), Some(204));
    // Until 30 buckets (3 s) have elapsed; the connections series always reaches the current bucket.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (recording, took, size) = loop {
        let asked = std::time::Instant::now();
        let reply = call(control, "GET", "/recording", &[], b"").await;
        let took = asked.elapsed();
        assert_eq!(reply.status(), Some(200));
        let recording = json_of(&reply);
        if recording["connections"].as_array().map_or(0, Vec::len) >= 30 {
            break (recording, took, reply.body().len());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "30 buckets did not elapse within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let http = recording["routes"].as_object().unwrap();
    let tcp = recording["tcp_routes"].as_object().unwrap();
    assert_eq!((http.len(), tcp.len()), (450, 50));
    for (name, route) in http.iter().chain(tcp) {
        assert_eq!(route["buckets"], json!([]), "{name} reported a series");
    }
    assert!(
        size < 500 * 1024,
        "{size} bytes for 500 idle routes, over 1 KiB a route"
    );
    assert!(
        took < Duration::from_secs(5),
        "GET /recording took {took:?}"
    );
    f.shutdown().await;
}
