//! End-to-end tests of the data plane over loopback: each behaviour as a client sees it, and what the recorder
//! counted. Real time, but every delay is short and every assertion is an exact count or a physical bound.

use crate::common;

use std::time::{Duration, Instant};

use common::{call, get, Reply};
use faultd::{Config, Options};

async fn start(yaml: &str) -> faultd::Faultd {
    let config = Config::from_yaml(yaml, "test.yaml").unwrap();
    faultd::start(config, Options::default()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_response_has_the_configured_status_headers_and_body_size() {
    let f = start(
        "routes:\n  payments: { method: POST, path: /payments/charge,\n    response: { status: 201, body_size: 2KiB, headers: { content-type: application/json, x-dep: payments } } }\n",
    )
    .await;
    let reply = call(
        f.data_addr(),
        "POST",
        "/payments/charge",
        &[],
        b"{\"amount\":1}",
    )
    .await;
    assert_eq!(reply.status(), Some(201));
    assert_eq!(reply.body().len(), 2048);
    assert_eq!(reply.header("x-dep").as_deref(), Some("payments"));
    serde_json::from_slice::<serde_json::Value>(reply.body()).unwrap();
    // The method is part of the route: a GET on the same path matches nothing.
    assert_eq!(
        get(f.data_addr(), "/payments/charge").await.status(),
        Some(404)
    );
    let r = f.recording();
    assert_eq!(r.routes["payments"].totals.completed.c2xx, 1);
    assert_eq!(r.unmatched, 1);
    f.shutdown().await;
}

/// Reads one HTTP/1.1 answer with a Content-Length from a keep-alive connection: its header names (lower case, in
/// order, repeated as sent) and its body.
async fn read_answer(stream: &mut tokio::net::TcpStream) -> (Vec<(String, String)>, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut raw = Vec::new();
    let end = loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut chunk))
            .await
            .expect("an answer within 20 s")
            .unwrap();
        assert!(n > 0, "the connection closed before the answer's head");
        raw.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(raw[..end].to_vec()).unwrap();
    let headers: Vec<(String, String)> = head
        .split("\r\n")
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse().unwrap())
        .expect("a content-length");
    let mut body = raw[end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed inside the body");
        body.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(body.len(), length, "nothing after the body");
    (headers, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_on_a_kept_alive_connection_carry_the_configured_headers_and_nothing_of_the_requests(
) {
    use tokio::io::AsyncWriteExt;
    let f = start(
        "routes:\n  ok: { path: /ok, response: { body_size: 64B, headers: { content-type: application/json, x-dep: ok } } }\n  \
         slow: { path: /slow, latency: { fixed: 20ms }, response: { headers: { x-dep: slow } } }\n",
    )
    .await;
    let mut stream = tokio::net::TcpStream::connect(f.data_addr()).await.unwrap();
    // Requests with more headers than the answers have, one after another on the same connection; the undelayed
    // route's answers are built on the map the connection parsed the request before into.
    for (i, path) in ["/ok", "/ok", "/slow", "/ok", "/nothing", "/ok"]
        .iter()
        .enumerate()
    {
        let mut request = format!("GET {path} HTTP/1.1\r\nHost: faultd\r\n");
        for h in 0..(4 + i) {
            request.push_str(&format!(
                "x-request-{h}: value-{i}\r\naccept: text/plain\r\n"
            ));
        }
        request.push_str("user-agent: data-plane-test\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let (headers, body) = read_answer(&mut stream).await;
        let mut names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        let value = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        match *path {
            "/ok" => {
                assert_eq!(
                    names,
                    ["content-length", "content-type", "date", "x-dep"],
                    "answer {i}"
                );
                assert_eq!(value("x-dep"), Some("ok"));
                assert_eq!(value("content-type"), Some("application/json"));
                assert_eq!(body.len(), 64);
            }
            "/slow" => {
                assert_eq!(names, ["content-length", "date", "x-dep"], "answer {i}");
                assert_eq!(value("x-dep"), Some("slow"));
            }
            _ => assert!(!names
                .iter()
                .any(|n| n.starts_with("x-request") || *n == "user-agent")),
        }
    }
    let r = f.recording();
    assert_eq!(r.routes["ok"].totals.completed.c2xx, 4);
    assert_eq!(r.routes["slow"].totals.completed.c2xx, 1);
    assert_eq!(r.unmatched, 1);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_answer_with_their_status_body_and_headers() {
    let f = start(
        "routes:\n  reviews: { path: /reviews/*, errors: [ { share: 100%, status: 503, body: busy, headers: { retry-after: '5' } } ] }\n",
    )
    .await;
    let reply = get(f.data_addr(), "/reviews/1").await;
    assert_eq!(reply.status(), Some(503));
    assert_eq!(reply.body(), b"busy");
    assert_eq!(reply.header("retry-after").as_deref(), Some("5"));
    assert_eq!(f.recording().routes["reviews"].totals.completed.c5xx, 1);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_latency_delays_the_answer_by_at_least_the_delay() {
    let f = start("routes:\n  pricing: { path: /price/*, latency: { fixed: 150ms } }\n").await;
    let started = Instant::now();
    assert_eq!(get(f.data_addr(), "/price/1").await.status(), Some(200));
    let took = started.elapsed();
    // Never early; late by scheduling noise only (a loose bound: this machine is shared).
    assert!(took >= Duration::from_millis(150), "{took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    let h = &f.recording().routes["pricing"].latency["before-start"];
    // The histogram keeps 3 significant digits: the recorded value's bucket must reach 150 ms.
    assert!(
        h.highest_equivalent(h.min()) >= 150_000_000,
        "served {}",
        h.min()
    );
    // faultd's own lateness is what the call outlasted its delay by: the served latency less 150 ms.
    let late = &f.recording().routes["pricing"].late["before-start"];
    assert_eq!(late.len(), 1);
    let outlasted = h.max().saturating_sub(150_000_000);
    assert!(
        late.lowest_equivalent(late.max()) <= outlasted
            && late.highest_equivalent(late.max()) + h.max() / 1_000 >= outlasted,
        "late {} ns, served {} ns",
        late.max(),
        h.max()
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_empty_and_malformed_reach_the_client_as_such() {
    let f = start(
        "routes:\n  reset: { path: /reset, reset: 100% }\n  empty: { path: /empty, empty: 100% }\n  malformed: { path: /malformed, malformed: 100% }\n",
    )
    .await;
    assert!(matches!(get(f.data_addr(), "/reset").await, Reply::Reset));
    assert!(matches!(get(f.data_addr(), "/empty").await, Reply::Empty));
    assert!(matches!(
        get(f.data_addr(), "/malformed").await,
        Reply::Garbage(_)
    ));
    let r = f.recording();
    assert_eq!(r.routes["reset"].totals.resets, 1);
    assert_eq!(r.routes["empty"].totals.empty, 1);
    assert_eq!(r.routes["malformed"].totals.malformed, 1);
    assert_eq!(f.in_flight(), 0);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_body_takes_size_over_rate() {
    let f = start("routes:\n  report: { path: /report, slow_body: { rate: 4KiB/s }, response: { body_size: 1KiB } }\n").await;
    let started = Instant::now();
    let reply = get(f.data_addr(), "/report").await;
    let took = started.elapsed();
    assert_eq!(reply.body().len(), 1024);
    // 1 KiB at 4 KiB/s: the last byte leaves at 250 ms.
    assert!(took >= Duration::from_millis(250), "{took:?}");
    assert!(took < Duration::from_millis(2000), "{took:?}");
    // The trickle is the answer's own time, not faultd's lateness.
    let r = f.recording();
    assert_eq!(r.routes["report"].totals.completed.c2xx, 1);
    assert!(
        r.routes["report"].late.is_empty(),
        "{:?}",
        r.routes["report"].late
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_reaches_an_https_upstream_verified_against_the_given_ca_only() {
    let ca = std::env::temp_dir().join(format!("faultd-upstream-ca-{}.pem", std::process::id()));
    let config = Config::from_yaml(
        "routes:\n  accounts: { path: /accounts/*, response: { status: 202, body_size: 100B } }\ntls: {}\n",
        "upstream.yaml",
    )
    .unwrap();
    let upstream = faultd::start(
        config,
        Options {
            ca_out: Some(ca.clone()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    upstream.start_schedule(tokio::time::Instant::now());
    let url = format!("https://localhost:{}", upstream.data_addr().port());
    let proxy = start(&format!(
        "routes:\n  trusted: {{ path: /accounts/*, proxy: {{ url: '{url}', ca: '{}' }} }}\n  \
         system: {{ path: /system/*, proxy: '{url}' }}\n",
        ca.display()
    ))
    .await;
    let reply = get(proxy.data_addr(), "/accounts/7?x=1").await;
    assert_eq!(reply.status(), Some(202));
    assert_eq!(reply.body().len(), 100);
    // The system's roots do not hold the upstream's run CA: the handshake fails, answered 502 with the reason.
    let reply = get(proxy.data_addr(), "/system/7").await;
    assert_eq!(reply.status(), Some(502));
    let body = String::from_utf8_lossy(reply.body()).to_string();
    assert!(body.contains("UnknownIssuer"), "{body}");
    assert_eq!(upstream.recording().routes["accounts"].totals.arrivals, 1);
    let _ = std::fs::remove_file(&ca);
    proxy.shutdown().await;
    upstream.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_forwards_to_the_upstream_with_faults_in_the_path() {
    let upstream = start(
        "routes:\n  accounts: { path: /accounts/*, response: { status: 202, body_size: 100B } }\n",
    )
    .await;
    let proxy = start(&format!(
        "routes:\n  accounts: {{ path: /accounts/*, proxy: 'http://{}', errors: [ {{ share: 0%, status: 500 }} ] }}\n",
        upstream.data_addr()
    ))
    .await;
    let reply = get(proxy.data_addr(), "/accounts/7?x=1").await;
    assert_eq!(reply.status(), Some(202));
    assert_eq!(reply.body().len(), 100);
    assert_eq!(upstream.recording().routes["accounts"].totals.arrivals, 1);
    proxy.shutdown().await;
    upstream.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_first_fails_the_first_calls_then_recovers() {
    let f = start(
        "routes:\n  accounts: { path: /accounts/*, fail_first: { calls: 3, status: 503 } }\n",
    )
    .await;
    let mut statuses = Vec::new();
    for i in 0..5 {
        statuses.push(
            get(f.data_addr(), &format!("/accounts/{i}"))
                .await
                .status()
                .unwrap(),
        );
    }
    assert_eq!(statuses, [503, 503, 503, 200, 200]);
    f.shutdown().await;
}

async fn fault_sequence(seed: u64) -> Vec<String> {
    let f = start(&format!(
        "seed: {seed}\nroutes:\n  mix: {{ path: /mix, errors: [ {{ share: 30%, status: 503 }}, {{ share: 20%, status: 429 }} ], reset: 10%, empty: 10% }}\n"
    ))
    .await;
    let mut seen = Vec::new();
    for _ in 0..40 {
        seen.push(match get(f.data_addr(), "/mix").await {
            Reply::Http { status, .. } => status.to_string(),
            Reply::Reset => "reset".to_string(),
            Reply::Empty => "empty".to_string(),
            Reply::Garbage(_) => "garbage".to_string(),
        });
    }
    f.shutdown().await;
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_gives_the_same_fault_sequence() {
    let a = fault_sequence(11).await;
    let b = fault_sequence(11).await;
    let c = fault_sequence(12).await;
    assert_eq!(a, b);
    assert_ne!(a, c);
    // The mix really is mixed: every kind shows up in 40 calls.
    for kind in ["200", "503", "429", "reset", "empty"] {
        assert!(a.iter().any(|s| s == kind), "{kind} missing from {a:?}");
    }
}

/// curl's exit code and what it printed with `-w`.
async fn curl(args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "-o", "/dev/null"])
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot start curl: {e} (apt-get install -y curl)"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_answer_announces_its_whole_body_and_ends_halfway_for_curl_over_either_version()
{
    let f = start(
        "routes:\n  cut: { path: /cut, truncated: 100%, response: { body_size: 1KiB } }\n  whole: { path: /whole, response: { body_size: 1KiB } }\n",
    )
    .await;
    let written = "%{http_code} %{size_download}";
    let url = |path: &str| format!("http://{}{path}", f.data_addr());
    for version in ["--http1.1", "--http2-prior-knowledge"] {
        let (code, got) = curl(&[version, "-w", written, &url("/whole")]).await;
        assert_eq!((code, got.as_str()), (0, "200 1024"), "{version}");
    }
    // HTTP/1.1: the head, 512 bytes, then the connection ends short of Content-Length: curl's 18, a partial file.
    let (code, got) = curl(&["--http1.1", "-w", written, &url("/cut")]).await;
    assert_eq!((code, got.as_str()), (18, "200 512"));
    // HTTP/2: the stream ends short of its content-length, which the client's HTTP/2 layer refuses as malformed:
    // curl's 92, a stream error. Whether curl hands on the head and the first bytes before the error depends on
    // how the frames arrive together; never more than the half that was sent.
    let (code, got) = curl(&["--http2-prior-knowledge", "-w", written, &url("/cut")]).await;
    assert_eq!(code, 92, "{got}");
    assert!(got == "200 512" || got == "000 0", "{got}");
    let r = f.recording();
    let cut = &r.routes["cut"].totals;
    assert_eq!((cut.truncated, cut.completed.total()), (2, 0));
    assert_eq!(r.routes["whole"].totals.completed.c2xx, 2);
    assert_eq!(f.in_flight(), 0);
    f.shutdown().await;
}
