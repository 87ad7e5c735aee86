//! loadgen over HTTPS against a real faultd that terminates TLS with its run's CA: requests are verified against
//! that CA alone, connections are reused and sessions resumed, and a handshake fault becomes a `connect_error`
//! whose reason the recording keeps; the HTTP/2 and gRPC client asks for h2 by ALPN.

use std::time::Duration;

use loadgen::{start, LoadSpec, RunOptions, TlsSpec};
use tokio::time::Instant;

async fn faultd(route: &str, tls: &str, ca: &std::path::Path) -> faultd::Faultd {
    let config = faultd::Config::from_yaml(
        &format!("seed: 9\nroutes:\n  any: {{ path: /**{route} }}\ntls: {tls}\n"),
        "https-test.yaml",
    )
    .unwrap();
    let f = faultd::start(
        config,
        faultd::Options {
            ca_out: Some(ca.to_path_buf()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    f.start_schedule(Instant::now());
    f
}

fn ca_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("loadgen-https-{}-{name}.pem", std::process::id()))
}

fn spec(ca: Option<&std::path::Path>, insecure: bool, connections: u32) -> LoadSpec {
    let mut spec = LoadSpec::constant("200/s".parse().unwrap(), "/price/{rand:1..100}");
    spec.connections = connections;
    spec.timeout = "2s".parse().unwrap();
    spec.tls = Some(TlsSpec {
        ca: ca.map(|p| p.to_path_buf()),
        insecure,
    });
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_requests_verify_against_the_run_ca_and_reuse_their_connections() {
    let ca = ca_path("ok");
    let f = faultd("", "{}", &ca).await;
    let url = format!("https://localhost:{}", f.data_addr().port());
    let options = RunOptions::new(url, Duration::from_secs(1));
    let recording = start(spec(Some(&ca), false, 8), options, Instant::now())
        .unwrap()
        .finish()
        .await;
    assert!(recording.conservation.holds, "{:?}", recording.conservation);
    assert_eq!(
        recording.totals.ok, 200,
        "{:?} {:?}",
        recording.totals, recording.connect_errors
    );
    let tls = recording.tls.expect("an https run records its handshakes");
    // Keep-alive: a handful of connections for 200 requests, each one handshake (full or resumed).
    assert!(tls.handshakes + tls.resumed <= 8, "{tls:?}");
    assert_eq!(tls.failed, 0);
    let served = f.tls_recording().unwrap().totals.handshakes;
    assert_eq!(
        served.values().sum::<u64>(),
        tls.handshakes + tls.resumed,
        "{served:?}"
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_and_grpc_reach_an_https_target_by_alpn_h2() {
    let ca = ca_path("h2");
    let f = faultd("", "{}", &ca).await;
    let url = format!("https://localhost:{}", f.data_addr().port());
    // A REST load over HTTP/2 and a gRPC one: both ask for h2 by ALPN, verified against the run's CA.
    let mut rest = spec(Some(&ca), false, 2);
    rest.requests[0].http2 = true;
    let mut grpc = spec(Some(&ca), false, 2);
    grpc.requests = vec![loadgen::RequestTemplate {
        grpc: Some("/shop.Catalog/GetProduct".into()),
        ..Default::default()
    }];
    for spec in [rest, grpc] {
        let options = RunOptions::new(url.clone(), Duration::from_secs(1));
        let recording = start(spec, options, Instant::now()).unwrap().finish().await;
        assert!(recording.conservation.holds, "{:?}", recording.conservation);
        assert_eq!(
            recording.totals.ok, 200,
            "{:?} {:?}",
            recording.totals, recording.connect_errors
        );
        let tls = recording.tls.expect("an https run records its handshakes");
        assert_eq!(
            tls.handshakes + tls.resumed,
            2,
            "one per connection: {tls:?}"
        );
    }
    let http2: u64 = f
        .recording()
        .connections
        .iter()
        .map(|c| c.http2_opened)
        .sum();
    assert_eq!(http2, 4, "every connection spoke HTTP/2");
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_refused_to_the_http2_client_is_a_connect_error_with_its_reason() {
    let ca = ca_path("h2-expired");
    let f = faultd("", "{ faults: { expired: 100% } }", &ca).await;
    let url = format!("https://localhost:{}", f.data_addr().port());
    let mut spec = spec(Some(&ca), false, 1);
    spec.requests[0].http2 = true;
    spec.rate = Some(loadgen::RateSpec::Constant("20/s".parse().unwrap()));
    let options = RunOptions::new(url, Duration::from_secs(1));
    let recording = start(spec, options, Instant::now()).unwrap().finish().await;
    assert_eq!(recording.totals.ok, 0);
    assert!(recording.totals.connect_error > 0, "{:?}", recording.totals);
    assert!(
        recording
            .connect_errors
            .contains_key("tls: certificate expired"),
        "{:?}",
        recording.connect_errors
    );
    assert!(recording.tls.unwrap().failed > 0);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_a_connect_error_with_its_reason_and_sessions_resume() {
    let ca = ca_path("expired");
    // Half the calls reset their connection, so lanes open new ones all run long: 30% of those handshakes get
    // the expired certificate, and the others can resume the session of an earlier one.
    let f = faultd(", reset: 50%", "{ faults: { expired: 30% } }", &ca).await;
    let url = format!("https://127.0.0.1:{}", f.data_addr().port());
    let options = RunOptions::new(url, Duration::from_secs(1));
    let recording = start(spec(Some(&ca), false, 1), options, Instant::now())
        .unwrap()
        .finish()
        .await;
    assert!(recording.conservation.holds, "{:?}", recording.conservation);
    let expired = recording
        .connect_errors
        .get("tls: certificate expired")
        .copied()
        .unwrap_or(0);
    assert!(expired > 0, "{:?}", recording.connect_errors);
    // Every connect_error has its reason: the expired handshakes, and the calls faultd reset.
    assert_eq!(
        recording.totals.connect_error,
        recording.connect_errors.values().sum::<u64>(),
        "{:?}",
        recording.connect_errors
    );
    let tls = recording.tls.unwrap();
    assert_eq!(tls.failed, expired);
    assert!(tls.resumed > 0, "{tls:?}");
    assert_eq!(
        f.tls_recording().unwrap().totals.handshakes["expired"],
        expired
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_accepts_a_certificate_nobody_trusts_and_no_ca_refuses_it() {
    let ca = ca_path("untrusted");
    let f = faultd("", "{ faults: { untrusted: 100% } }", &ca).await;
    let url = format!("https://127.0.0.1:{}", f.data_addr().port());
    let recording = start(
        spec(None, true, 2),
        RunOptions::new(url.clone(), Duration::from_millis(200)),
        Instant::now(),
    )
    .unwrap()
    .finish()
    .await;
    assert_eq!(recording.totals.ok, 40, "{:?}", recording.connect_errors);
    let recording = start(
        spec(Some(&ca), false, 2),
        RunOptions::new(url, Duration::from_millis(200)),
        Instant::now(),
    )
    .unwrap()
    .finish()
    .await;
    assert_eq!(recording.totals.connect_error, 40);
    assert_eq!(recording.connect_errors["tls: unknown issuer"], 40);
    f.shutdown().await;
}

#[test]
fn a_ca_file_that_cannot_be_read_is_refused_before_any_traffic() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _guard = rt.enter();
    let options = RunOptions::new("https://127.0.0.1:9", Duration::from_secs(1));
    let e = start(
        spec(Some(std::path::Path::new("/nonexistent/ca.pem")), false, 1),
        options,
        Instant::now(),
    )
    .err()
    .expect("refused");
    let text = e.to_string();
    assert!(
        text.contains("load.tls.ca") && text.contains("/nonexistent/ca.pem"),
        "{text}"
    );
}
