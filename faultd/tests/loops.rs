//! Routes that would send faultd's calls back to itself: refused when the upstream is one of its own listeners, and
//! ended at the first repeat (508 Loop Detected, counted) when the loop goes through a second faultd.

use crate::common;

use std::net::SocketAddr;

use common::{call, get, wait_for, Reply};
use faultd::{Config, Options, PhaseRoute};

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A port free a moment ago, for a configuration that must name faultd's own port before faultd binds it.
fn free_port() -> u16 {
    faultline_units::port::handed_out().expect("a free loopback port")
}

fn problem(reply: &Reply) -> (String, String) {
    assert_eq!(
        reply.status(),
        Some(400),
        "{:?}",
        String::from_utf8_lossy(reply.body())
    );
    let v: serde_json::Value = serde_json::from_slice(reply.body()).unwrap();
    (
        v["field"].as_str().unwrap_or_default().to_string(),
        v["error"].as_str().unwrap_or_default().to_string(),
    )
}

fn proxy_to(url: &str) -> PhaseRoute {
    serde_json::from_value(serde_json::json!({ "proxy": url })).unwrap()
}

async fn start(yaml: &str) -> faultd::Faultd {
    let config = Config::from_yaml(yaml, "loops.yaml").unwrap();
    let options = Options {
        control: Some(loopback()),
        toxiproxy_api: Some(loopback()),
        ..Options::default()
    };
    faultd::start(config, options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_proxying_to_faultds_own_data_plane_is_refused_at_start() {
    let port = free_port();
    let config = Config::from_yaml(
        &format!("routes:\n  again: {{ path: /**, proxy: 'http://localhost:{port}' }}\n"),
        "self.yaml",
    )
    .unwrap();
    let options = Options {
        listen: SocketAddr::from(([127, 0, 0, 1], port)),
        ..Options::default()
    };
    let e = faultd::start(config, options).await.err().expect("refused");
    let text = e.to_string();
    assert!(
        text.contains("routes.again.proxy") && text.contains("faultd's own listener"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_proxying_to_any_of_faultds_listeners_is_refused_through_the_control_api() {
    let f = start("routes:\n  pricing: { path: /price/* }\n").await;
    let control = f.control_addr().unwrap();
    let data = f.data_addr();
    let body = serde_json::json!({
        "routes": { "pricing": { "path": "/price/*", "proxy": format!("http://{data}") } }
    })
    .to_string();
    let (field, error) = problem(&call(control, "PUT", "/config", &[], body.as_bytes()).await);
    assert_eq!(field, "routes.pricing.proxy");
    assert!(error.contains("faultd's own listener"), "{error}");
    // One route at a time too, to the control API itself or the Toxiproxy API.
    for own in [control, f.toxiproxy_addr().unwrap()] {
        let body =
            serde_json::json!({ "proxy": format!("http://localhost:{}", own.port()) }).to_string();
        let (field, error) =
            problem(&call(control, "PUT", "/routes/pricing", &[], body.as_bytes()).await);
        assert_eq!(field, "routes.pricing.proxy");
        assert!(error.contains(&own.to_string()), "{error}");
    }
    // The route still answers as before.
    assert_eq!(get(data, "/price/1").await.status(), Some(200));
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_route_to_faultds_own_listener_is_refused_through_the_toxiproxy_api() {
    let f = start("routes:\n  any: { path: /** }\n").await;
    let api = f.toxiproxy_addr().unwrap();
    for upstream in [
        f.data_addr().to_string(),
        format!("localhost:{}", api.port()),
    ] {
        let body =
            serde_json::json!({ "name": "db", "listen": "127.0.0.1:0", "upstream": upstream })
                .to_string();
        let reply = call(api, "POST", "/proxies", &[], body.as_bytes()).await;
        assert_eq!(reply.status(), Some(400), "{upstream}");
        let text = String::from_utf8_lossy(reply.body()).to_string();
        assert!(text.contains("faultd's own listener"), "{text}");
    }
    // A route cannot forward to another route's listener either.
    let first = f
        .tcp()
        .create(faultd::tcp::ProxySpec::new(
            "first",
            "127.0.0.1:0",
            "127.0.0.1:9",
        ))
        .unwrap();
    let e = f
        .tcp()
        .create(faultd::tcp::ProxySpec::new(
            "second",
            "127.0.0.1:0",
            &first.listen,
        ))
        .unwrap_err();
    assert!(e.to_string().contains("faultd's own listener"), "{e}");
    f.shutdown().await;
}

/// TCP connections with an end on one of `ports`, as the kernel lists them (/proc/net/tcp and tcp6): both ends of
/// a loopback connection count, listening sockets and closed ones (TIME_WAIT, CLOSE) do not. Other tests of the
/// same process open their own connections to other ports, so this counts only the ones under test.
fn connections_on(ports: &[u16]) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = |addr: &str| {
                addr.rsplit_once(':')
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            };
            // st: 0A listening, 06 TIME_WAIT, 07 CLOSE.
            let open = !matches!(fields.get(3), Some(&"0A" | &"06" | &"07"));
            let ours = fields[1..=2]
                .iter()
                .any(|a| port(a).is_some_and(|p| ports.contains(&p)));
            if open && ours {
                n += 1;
            }
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_through_a_second_faultd_ends_at_the_first_repeat_with_508_and_is_counted() {
    let a = start("routes:\n  hop: { path: /** }\n").await;
    let b = start("routes:\n  hop: { path: /** }\n").await;
    // Neither sees the loop in its own configuration: each proxies to the other.
    b.set_route("hop", &proxy_to(&format!("http://{}", a.data_addr())))
        .unwrap();
    a.set_route("hop", &proxy_to(&format!("http://{}", b.data_addr())))
        .unwrap();
    let ports = [a.data_addr().port(), b.data_addr().port()];
    let before = connections_on(&ports);
    let reply = call(a.data_addr(), "GET", "/loop", &[], b"").await;
    assert_eq!(
        reply.status(),
        Some(508),
        "{:?}",
        String::from_utf8_lossy(reply.body())
    );
    assert_eq!(
        reply.header("content-type").as_deref(),
        Some("application/json")
    );
    let body: serde_json::Value = serde_json::from_slice(reply.body()).unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("loop detected"),
        "{body}"
    );
    let (ra, rb) = (a.recording(), b.recording());
    assert_eq!(ra.loops_detected, 1);
    assert_eq!(rb.loops_detected, 0);
    let arrivals = |r: &faultd::Recording| r.routes["hop"].totals.arrivals;
    assert!(arrivals(&ra) <= 3, "{} arrivals at A", arrivals(&ra));
    assert!(arrivals(&rb) <= 3, "{} arrivals at B", arrivals(&rb));
    let metrics = get(a.control_addr().unwrap(), "/metrics").await;
    let text = String::from_utf8_lossy(metrics.body()).to_string();
    assert!(text.contains("faultd_loops_detected_total{} 1"), "{text}");
    // The connections of the one call (pooled between the two) do not pile up.
    wait_for(
        "connections between the two back near where they were",
        || connections_on(&ports) <= before + 8,
    )
    .await;
    a.shutdown().await;
    b.shutdown().await;
}
