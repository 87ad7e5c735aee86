//! The Toxiproxy-compatible API: paths, defaults, status codes and error shapes, over real loopback sockets.

use crate::common;
use crate::tcp;

use std::net::SocketAddr;
use std::time::Duration;

use common::{call, get, Reply};
use serde_json::{json, Value};
use tcp::{connect, faultd, round_trip, Echo};

async fn post(api: SocketAddr, path: &str, body: Value) -> Reply {
    call(
        api,
        "POST",
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

fn assert_error(reply: &Reply, status: u16, contains: &str) {
    assert_eq!(
        reply.status(),
        Some(status),
        "{:?}",
        String::from_utf8_lossy(reply.body())
    );
    let body = json_of(reply);
    assert_eq!(body["status"], json!(status), "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(contains),
        "{error:?} should contain {contains:?}"
    );
}

#[tokio::test]
async fn the_proxy_life_cycle_answers_as_toxiproxy_does() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let api = f.toxiproxy_addr().unwrap();
    let upstream = echo.addr.to_string();

    let version = get(api, "/version").await;
    assert_eq!(version.status(), Some(200));
    assert!(String::from_utf8_lossy(version.body()).starts_with("2."));

    let created = post(
        api,
        "/proxies",
        json!({"name": "redis", "listen": "127.0.0.1:0", "upstream": upstream}),
    )
    .await;
    assert_eq!(created.status(), Some(201));
    let proxy = json_of(&created);
    assert_eq!(proxy["name"], "redis");
    assert_eq!(proxy["enabled"], true);
    assert_eq!(proxy["toxics"], json!([]));
    let listen: SocketAddr = proxy["listen"].as_str().unwrap().parse().unwrap();
    assert_ne!(listen.port(), 0);

    assert_error(
        &post(
            api,
            "/proxies",
            json!({"name": "redis", "upstream": upstream}),
        )
        .await,
        409,
        "proxy already exists",
    );
    let listed = json_of(&get(api, "/proxies").await);
    assert_eq!(listed["redis"]["listen"], proxy["listen"]);

    let toxic = post(
        api,
        "/proxies/redis/toxics",
        json!({"type": "latency", "attributes": {"latency": 300}}),
    )
    .await;
    assert_eq!(toxic.status(), Some(200));
    let toxic = json_of(&toxic);
    assert_eq!(
        toxic,
        json!({"name": "latency_downstream", "type": "latency", "stream": "downstream", "toxicity": 1.0, "attributes": {"latency": 300, "jitter": 0}})
    );
    assert_error(
        &post(api, "/proxies/redis/toxics", json!({"type": "latency"})).await,
        409,
        "toxic already exists",
    );

    let mut s = connect(listen).await.unwrap();
    assert!(round_trip(&mut s, b"PING").await >= Duration::from_millis(300));

    let updated = json_of(
        &post(
            api,
            "/proxies/redis/toxics/latency_downstream",
            json!({"attributes": {"jitter": 10}}),
        )
        .await,
    );
    assert_eq!(updated["attributes"], json!({"latency": 300, "jitter": 10}));
    assert_eq!(
        json_of(&get(api, "/proxies/redis/toxics/latency_downstream").await),
        updated
    );
    assert_eq!(
        json_of(&get(api, "/proxies/redis/toxics").await),
        json!([updated])
    );
    assert_eq!(
        call(
            api,
            "DELETE",
            "/proxies/redis/toxics/latency_downstream",
            &[],
            b""
        )
        .await
        .status(),
        Some(204)
    );
    assert_error(
        &get(api, "/proxies/redis/toxics/latency_downstream").await,
        404,
        "toxic not found",
    );
    assert!(round_trip(&mut s, b"PING").await < Duration::from_millis(250));

    let down = json_of(&post(api, "/proxies/redis", json!({"enabled": false})).await);
    assert_eq!(down["enabled"], false);
    assert!(connect(listen).await.is_err());
    post(
        api,
        "/proxies/redis/toxics",
        json!({"type": "timeout", "attributes": {"timeout": 0}}),
    )
    .await;
    assert_eq!(post(api, "/reset", json!(null)).await.status(), Some(204));
    let after = json_of(&get(api, "/proxies/redis").await);
    assert_eq!(
        (after["enabled"].clone(), after["toxics"].clone()),
        (json!(true), json!([]))
    );
    let mut again = connect(listen).await.unwrap();
    round_trip(&mut again, b"back").await;

    assert_eq!(
        call(api, "DELETE", "/proxies/redis", &[], b"")
            .await
            .status(),
        Some(204)
    );
    assert_error(&get(api, "/proxies/redis").await, 404, "proxy not found");
    assert!(connect(listen).await.is_err());
    f.shutdown().await;
}

#[tokio::test]
async fn populate_creates_keeps_and_recreates() {
    let echo = Echo::start().await;
    let other = Echo::start().await;
    let f = faultd(7).await;
    let api = f.toxiproxy_addr().unwrap();
    let body = json!([
        {"name": "a", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string()},
        {"name": "b", "listen": "localhost:0", "upstream": echo.addr.to_string()},
    ]);
    let first = post(api, "/populate", body.clone()).await;
    assert_eq!(first.status(), Some(201));
    let first = json_of(&first);
    assert_eq!(first["proxies"].as_array().unwrap().len(), 2);
    let a_listen = first["proxies"][0]["listen"].clone();
    let second = json_of(
        &post(
            api,
            "/populate",
            json!([
                {"name": "a", "listen": a_listen, "upstream": echo.addr.to_string()},
                {"name": "b", "listen": "127.0.0.1:0", "upstream": other.addr.to_string()},
            ]),
        )
        .await,
    );
    assert_eq!(
        second["proxies"][0]["listen"], a_listen,
        "an unchanged proxy is kept"
    );
    assert_eq!(second["proxies"][1]["upstream"], other.addr.to_string());
    assert_error(
        &post(api, "/populate", json!([{"name": "c"}])).await,
        400,
        "missing required field: upstream",
    );
    assert_error(
        &post(api, "/populate", json!({"name": "c"})).await,
        400,
        "bad request body",
    );
    f.shutdown().await;
}

#[tokio::test]
async fn bad_requests_get_toxiproxys_error_shape_and_the_other_proxies_keep_forwarding() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let api = f.toxiproxy_addr().unwrap();
    let upstream = echo.addr.to_string();
    let good = json_of(
        &post(
            api,
            "/proxies",
            json!({"name": "db", "listen": "127.0.0.1:0", "upstream": upstream}),
        )
        .await,
    );
    let listen: SocketAddr = good["listen"].as_str().unwrap().parse().unwrap();
    let mut s = connect(listen).await.unwrap();

    assert_error(
        &call(api, "POST", "/proxies", &[], b"{not json").await,
        400,
        "bad request body",
    );
    assert_error(
        &post(api, "/proxies", json!({"upstream": upstream})).await,
        400,
        "missing required field: name",
    );
    assert_error(
        &post(api, "/proxies", json!({"name": "x"})).await,
        400,
        "missing required field: upstream",
    );
    assert_error(
        &post(
            api,
            "/proxies",
            json!({"name": "x", "listen": "0.0.0.0:0", "upstream": upstream}),
        )
        .await,
        400,
        "is not loopback: faultd listens on loopback only unless started with --allow-listen 0.0.0.0",
    );
    assert_error(
        &post(
            api,
            "/proxies",
            json!({"name": "x", "listen": good["listen"], "upstream": upstream}),
        )
        .await,
        409,
        "already in use",
    );
    assert_error(
        &post(
            api,
            "/proxies",
            json!({"name": "x", "upstream": "example.com:80"}),
        )
        .await,
        400,
        "allow_hosts",
    );
    assert_error(
        &post(
            api,
            "/proxies",
            json!({"name": "x", "upstream": "nohostport"}),
        )
        .await,
        400,
        "host:port",
    );
    assert_error(
        &post(api, "/proxies/db/toxics", json!({"type": "teleport"})).await,
        400,
        "invalid toxic type",
    );
    assert_error(
        &post(
            api,
            "/proxies/db/toxics",
            json!({"type": "latency", "stream": "sideways"}),
        )
        .await,
        400,
        "stream was invalid",
    );
    assert_error(
        &post(
            api,
            "/proxies/db/toxics",
            json!({"type": "latency", "attributes": {"latency": -1}}),
        )
        .await,
        400,
        "attributes.latency",
    );
    assert_error(
        &post(
            api,
            "/proxies/db/toxics",
            json!({"type": "bandwidth", "attributes": {"rate": "fast"}}),
        )
        .await,
        400,
        "attributes.rate",
    );
    assert_error(
        &post(
            api,
            "/proxies/db/toxics",
            json!({"type": "latency", "toxicity": 2.0}),
        )
        .await,
        400,
        "toxicity",
    );
    assert_error(
        &post(
            api,
            "/proxies/db/toxics",
            json!({"type": "slicer", "attributes": {"average_size": 0}}),
        )
        .await,
        400,
        "average_size",
    );
    assert_error(
        &post(
            api,
            "/proxies/db/toxics",
            json!({"type": "timeout", "attributes": {"timeout": 1e15}}),
        )
        .await,
        400,
        "timeout",
    );
    assert_error(
        &post(api, "/proxies/nope/toxics", json!({"type": "latency"})).await,
        404,
        "proxy not found",
    );
    assert_error(
        &post(api, "/proxies/nope", json!({"enabled": false})).await,
        404,
        "proxy not found",
    );
    assert_error(
        &call(api, "DELETE", "/proxies/db/toxics/none", &[], b"").await,
        404,
        "toxic not found",
    );
    assert_error(
        &post(api, "/proxies/db", json!({"listen": "10.1.2.3:80"})).await,
        400,
        "loopback",
    );

    round_trip(&mut s, b"still here").await;
    assert!(json_of(&get(api, "/proxies/db/toxics").await)
        .as_array()
        .unwrap()
        .is_empty());
    f.shutdown().await;
}

#[tokio::test]
async fn the_recording_and_metrics_show_tcp_routes_beside_http_ones() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = tcp::route(&f, "cache", echo.addr);
    tcp::toxic(
        &f,
        "cache",
        json!({"type": "latency", "attributes": {"latency": 10}}),
    );
    let mut s = connect(addr).await.unwrap();
    round_trip(&mut s, b"GET k").await;
    let control = f.control_addr().unwrap();
    let recording = json_of(&get(control, "/recording").await);
    assert!(recording.get("routes").is_some(), "the HTTP shape is kept");
    let cache = &recording["tcp_routes"]["cache"];
    assert_eq!(cache["totals"]["attempts"], 1);
    assert_eq!(cache["open"], 1);
    assert_eq!(cache["totals"]["bytes_upstream"], 5);
    assert_eq!(cache["totals"]["toxics"]["latency"], 1);
    assert!(cache["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["max_open"] == 1));
    let metrics = String::from_utf8_lossy(get(control, "/metrics").await.body()).to_string();
    assert!(
        metrics.contains("faultd_tcp_open_connections{tcp_route=\"cache\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("faultd_tcp_bytes_total{tcp_route=\"cache\",stream=\"downstream\"} 5"),
        "{metrics}"
    );
    f.shutdown().await;
}

#[tokio::test]
async fn without_tcp_routes_the_recording_has_no_tcp_field() {
    let f = faultd(7).await;
    let recording = json_of(&get(f.control_addr().unwrap(), "/recording").await);
    assert!(recording.get("tcp_routes").is_none());
    f.shutdown().await;
}

#[tokio::test]
async fn proxy_and_toxic_names_the_api_could_not_address_are_refused_naming_the_field() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let api = f.toxiproxy_addr().unwrap();
    let upstream = echo.addr.to_string();
    let long = "p".repeat(100_000);
    for (name, says) in [
        ("a/b", "'/'"),
        ("a b", "' '"),
        ("a%2Fb", "'%'"),
        (long.as_str(), "100000 bytes, over faultd's limit of 200"),
    ] {
        assert_error(
            &post(
                api,
                "/proxies",
                json!({"name": name, "listen": "127.0.0.1:0", "upstream": upstream}),
            )
            .await,
            400,
            says,
        );
    }
    let listed = json_of(&get(api, "/proxies").await);
    assert_eq!(listed, json!({}), "nothing was created");
    // The longest name allowed works end to end, addressed by its path.
    let longest = "q".repeat(faultd::limits::MAX_NAME_BYTES);
    let created = post(
        api,
        "/proxies",
        json!({"name": longest, "listen": "127.0.0.1:0", "upstream": upstream}),
    )
    .await;
    assert_eq!(
        created.status(),
        Some(201),
        "{:?}",
        String::from_utf8_lossy(created.body())
    );
    let toxics = format!("/proxies/{longest}/toxics");
    assert_error(
        &post(
            api,
            &toxics,
            json!({"name": "x/y", "type": "latency", "attributes": {"latency": 1}}),
        )
        .await,
        400,
        "'/'",
    );
    let added = post(
        api,
        &toxics,
        json!({"name": "slow", "type": "latency", "attributes": {"latency": 1}}),
    )
    .await;
    assert_eq!(
        added.status(),
        Some(200),
        "{:?}",
        String::from_utf8_lossy(added.body())
    );
    let view = json_of(&get(api, &format!("/proxies/{longest}")).await);
    assert_eq!(view["toxics"][0]["name"], json!("slow"), "{view}");
}
