//! The demo calling an `https://` dependency: faultd on loopback with a CA it minted for the test. The demo trusts
//! the CA it is given and nothing else, a failed handshake is a failure with its own fallback reason, and the
//! `instant_reconnect` mistake turns each call on an expired certificate into 1 + INSTANT_RECONNECTS handshakes at
//! faultd's listener, where the recommended configuration makes one.
//!
//! Requests are sent one after the other and every figure is a count, so nothing here depends on timing.

use demo::layers::retry::INSTANT_RECONNECTS;
use demo::{DemoConfig, Options};
use faultd::tls::HandshakeOutcome;

/// Every answer closes its connection, so each call needs a handshake of its own.
const ROUTES: &str = "
routes:
  pricing: { path: /price/*, response: { headers: { connection: close, content-type: application/json } } }
";

/// Pricing only, with a breaker that never opens on these few calls.
const DEMO: &str = "operations: { pricing: { breaker: { min_calls: 1000 } } }";

async fn faultd_with(tls: &str) -> faultd::Faultd {
    let config =
        faultd::Config::from_yaml(&format!("{ROUTES}tls: {tls}\n"), "https-faultd.yaml").unwrap();
    faultd::start(config, faultd::Options::default())
        .await
        .unwrap()
}

async fn demo_for(f: &faultd::Faultd, ca: Option<String>, config: &str) -> demo::Demo {
    let options = Options {
        dependency_url: format!("https://{}", f.data_addr()),
        dependency_ca: ca,
        ..Default::default()
    };
    demo::start(
        DemoConfig::from_yaml(config, "https-demo.yaml").unwrap(),
        options,
    )
    .await
    .unwrap()
}

/// GETs `n` product pages one after the other; returns each answer's X-Fallback header.
async fn pages(d: &demo::Demo, n: usize) -> Vec<Option<String>> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .tls_backend_preconfigured(demo::layers::client::tls_config(None).unwrap())
        .build()
        .unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let r = client
            .get(format!("http://{}/product/{i}", d.addr()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        out.push(
            r.headers()
                .get("x-fallback")
                .map(|v| v.to_str().unwrap().to_string()),
        );
    }
    out
}

fn handshakes(f: &faultd::Faultd, outcome: HandshakeOutcome) -> u64 {
    f.tls_recording().unwrap().totals.count(outcome)
}

/// The count of `outcome` once it reaches `want`, or what it is after 2 s: faultd counts a refused certificate
/// when the client's alert reaches it, which can be just after the client has moved on.
async fn settled_handshakes(f: &faultd::Faultd, outcome: HandshakeOutcome, want: u64) -> u64 {
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let n = handshakes(f, outcome);
        if n >= want || tokio::time::Instant::now() >= until {
            return n;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_demo_calls_an_https_dependency_through_the_ca_it_is_given() {
    let f = faultd_with("{}").await;
    let d = demo_for(&f, f.ca_pem(), DEMO).await;
    assert_eq!(
        pages(&d, 5).await,
        vec![None; 5],
        "every price came from pricing"
    );
    // One connection per call: a full handshake first, then resumed ones.
    assert_eq!(
        handshakes(&f, HandshakeOutcome::Ok) + handshakes(&f, HandshakeOutcome::Resumed),
        5
    );
    assert_eq!(f.recording().routes["pricing"].totals.arrivals, 5);
    d.shutdown().await;
    f.shutdown().await;
}

#[tokio::test]
async fn without_the_run_ca_the_handshake_fails_and_the_fallback_says_why() {
    let f = faultd_with("{}").await;
    // The system's roots do not hold the run's CA: the certificate is untrusted.
    let d = demo_for(&f, None, DEMO).await;
    assert_eq!(pages(&d, 3).await, vec![Some("default".to_string()); 3]);
    assert_eq!(f.recording().routes["pricing"].totals.arrivals, 0);
    let metrics = d.metrics_text();
    assert!(metrics.contains("reason=\"handshake_failed\""), "{metrics}");
    d.shutdown().await;
    f.shutdown().await;
}

#[tokio::test]
async fn an_expired_certificate_costs_one_handshake_per_call_and_instant_reconnect_multiplies_it() {
    const CALLS: usize = 10;
    for (config, per_call) in [
        (DEMO.to_string(), 1),
        (
            format!("{DEMO}\nmistakes: [ instant_reconnect ]"),
            1 + INSTANT_RECONNECTS as u64,
        ),
    ] {
        let f = faultd_with("{ faults: { expired: 100% } }").await;
        let d = demo_for(&f, f.ca_pem(), &config).await;
        assert_eq!(
            pages(&d, CALLS).await,
            vec![Some("default".to_string()); CALLS]
        );
        let want = CALLS as u64 * per_call;
        assert_eq!(
            settled_handshakes(&f, HandshakeOutcome::Expired, want).await,
            want,
            "{config}"
        );
        assert_eq!(f.recording().routes["pricing"].totals.arrivals, 0);
        d.shutdown().await;
        f.shutdown().await;
    }
}

#[test]
fn a_dependency_ca_that_is_not_pem_is_refused_naming_it() {
    let err = demo::layers::client::tls_config(Some("not a certificate")).unwrap_err();
    assert!(err.is_bad_input());
    assert!(err.to_string().starts_with("dependency CA: "), "{err}");
}
