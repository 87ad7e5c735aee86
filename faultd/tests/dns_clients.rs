//! faultd's resolver against DNS software written by others: `dig` (Debian `bind9-dnsutils`) asking it over UDP
//! and, when it truncates, over TCP; `unbound` (Debian) started on a free loopback port with faultd as its only
//! upstream, whose checks faultd's answers pass and whose cache honours their TTL; and `dnspython` (PyPI, in
//! tests/requirements.txt), whose resolver reads each fault as its users would see it.
//!
//! Fails, not skips, without them: `apt-get install -y bind9-dnsutils unbound`, and dnspython in the Python of
//! `FAULTLINE_PYTHON` (scripts/test sets up .venv with it).

use std::process::Command;
use std::time::Duration;

use crate::servers::{installed, start, Server};

async fn faultd_with(yaml: &str) -> faultd::Faultd {
    let config =
        faultd::Config::from_yaml(yaml, "dns_clients.yaml").expect("the configuration is valid");
    faultd::start(config, faultd::Options::default())
        .await
        .expect("faultd starts")
}

fn need_dig() {
    assert!(
        Command::new("dig").arg("-v").output().is_ok(),
        "dig not found: install bind9-dnsutils (apt-get install -y bind9-dnsutils)"
    );
}

/// `dig` with these arguments, asking `127.0.0.1` on `port`: its standard output, trimmed.
fn dig(port: u16, args: &[&str]) -> String {
    let out = Command::new("dig")
        .args(["@127.0.0.1", "-p", &port.to_string(), "+time=2", "+tries=1"])
        .args(args)
        .output()
        .expect("dig runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

async fn dig_async(port: u16, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        dig(port, &args)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dig_reads_the_records_the_codes_and_follows_truncation_to_tcp() {
    need_dig();
    let faultd = faultd_with(
        "routes:\n  any: { path: /** }\n\
         dns:\n  names:\n    pricing.internal: { a: [127.0.0.1, 127.0.0.2], ttl: 30s }\n    \
         cut.internal: { a: [127.0.0.7], truncate: 100% }\n    broken.internal: { servfail: 100% }\n",
    )
    .await;
    let port = faultd.dns_addr().unwrap().port();
    let short = dig_async(port, &["pricing.internal", "A", "+short"]).await;
    assert_eq!(short, "127.0.0.1\n127.0.0.2");
    let ttl = dig_async(
        port,
        &["pricing.internal", "A", "+noall", "+answer", "+tcp"],
    )
    .await;
    assert!(ttl.contains("30\tIN\tA\t127.0.0.1"), "{ttl}");
    let cut = dig_async(port, &["cut.internal", "A"]).await;
    assert!(cut.contains("Truncated, retrying in TCP mode"), "{cut}");
    assert!(cut.contains("127.0.0.7"), "{cut}");
    let broken = dig_async(port, &["broken.internal", "A"]).await;
    assert!(broken.contains("status: SERVFAIL"), "{broken}");
    let other = dig_async(port, &["elsewhere.example", "A"]).await;
    assert!(other.contains("status: REFUSED"), "{other}");
    let dns = faultd.recording().dns.unwrap();
    let cut = &dns.names["cut.internal"].totals;
    assert_eq!(
        (cut.answered("truncated"), cut.answered("NOERROR")),
        (1, 1),
        "{cut:?}"
    );
    faultd.shutdown().await;
}

/// unbound on a free loopback port, forwarding every name to faultd at `upstream_port`, in a folder of its own;
/// nothing of the machine's (port 53, /etc/resolv.conf, its trust anchor) is touched.
fn start_unbound(upstream_port: u16) -> Server {
    assert!(
        installed("unbound") || std::path::Path::new("/usr/sbin/unbound").exists(),
        "unbound not found: install it (apt-get install -y unbound)"
    );
    let binary = if installed("unbound") {
        "unbound"
    } else {
        "/usr/sbin/unbound"
    };
    start(
        "unbound",
        Duration::from_secs(15),
        None,
        move |port, dir| {
            let conf = format!(
                "server:\n  interface: 127.0.0.1\n  port: {port}\n  do-ip6: no\n  do-daemonize: no\n  \
                 username: \"\"\n  chroot: \"\"\n  directory: \"{dir}\"\n  pidfile: \"{dir}/unbound.pid\"\n  \
                 use-syslog: no\n  logfile: \"\"\n  verbosity: 1\n  do-not-query-localhost: no\n  \
                 access-control: 127.0.0.0/8 allow\n  module-config: \"iterator\"\n  num-threads: 1\n  \
                 outgoing-range: 64\n  so-reuseport: no\n\
                 remote-control:\n  control-enable: no\n\
                 forward-zone:\n  name: \".\"\n  forward-addr: 127.0.0.1@{upstream_port}\n",
                dir = dir.display()
            );
            let path = dir.join("unbound.conf");
            std::fs::write(&path, conf).expect("unbound.conf written");
            let mut c = Command::new(binary);
            c.arg("-d").arg("-c").arg(path);
            c
        },
        |port| {
            // unbound answers its own identity without asking faultd.
            Command::new("dig")
                .args(["@127.0.0.1", "-p", &port.to_string(), "+time=1", "+tries=1"])
                .args(["id.server", "CH", "TXT"])
                .output()
                .is_ok_and(|o| o.status.success())
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_in_front_of_faultd_accepts_its_answers_and_caches_them_for_their_ttl() {
    need_dig();
    let faultd = faultd_with(
        "routes:\n  any: { path: /** }\n\
         dns:\n  names:\n    pricing.internal: { a: [127.0.0.5], ttl: 2s }\n    gone.internal: { nxdomain: 100% }\n",
    )
    .await;
    let upstream = faultd.dns_addr().unwrap().port();
    let unbound = tokio::task::spawn_blocking(move || start_unbound(upstream))
        .await
        .unwrap();
    let port = unbound.port;
    let queries = |faultd: &faultd::Faultd| {
        faultd.recording().dns.unwrap().names["pricing.internal"]
            .totals
            .queries
            .get("A")
            .copied()
            .unwrap_or(0)
    };
    for _ in 0..3 {
        let got = dig_async(port, &["pricing.internal", "A", "+short"]).await;
        assert_eq!(
            got,
            "127.0.0.5",
            "unbound's answer; its log:\n{}",
            unbound.log()
        );
    }
    assert_eq!(
        queries(&faultd),
        1,
        "unbound asked once and answered from its cache"
    );
    let answer = dig_async(port, &["pricing.internal", "A", "+noall", "+answer"]).await;
    let ttl: u32 = answer
        .split_whitespace()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("a TTL in {answer:?}"));
    assert!(
        ttl <= 2,
        "the cached TTL counts down from faultd's 2 s: {answer}"
    );
    // Past the TTL the cache has expired and unbound asks faultd again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let got = dig_async(port, &["pricing.internal", "A", "+short"]).await;
        assert_eq!(got, "127.0.0.5");
        if queries(&faultd) >= 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "unbound kept answering from its cache long past the 2 s TTL"
        );
    }
    let gone = dig_async(port, &["gone.internal", "A"]).await;
    assert!(gone.contains("status: NXDOMAIN"), "{gone}");
    drop(unbound);
    faultd.shutdown().await;
}

const DNSPYTHON: &str = r#"
import sys, dns.resolver, dns.exception
r = dns.resolver.Resolver(configure=False)
r.nameservers = ["127.0.0.1"]
r.port = int(sys.argv[1])
r.lifetime = 1.0
r.timeout = 1.0
for name in sys.argv[2:]:
    try:
        a = r.resolve(name, "A")
        print(name, "ok", a.rrset.ttl, ",".join(sorted(x.address for x in a)))
    except dns.resolver.NXDOMAIN:
        print(name, "nxdomain")
    except dns.resolver.NoNameservers as e:
        print(name, "servfail" if "SERVFAIL" in str(e) else "no_nameservers")
    except dns.exception.Timeout:
        print(name, "timeout")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dnspython_reads_addresses_nxdomain_servfail_and_a_timeout() {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import dns.resolver"])
        .output();
    assert!(
        matches!(&probe, Ok(o) if o.status.success()),
        "{python} cannot import dnspython: scripts/test sets it up in .venv (tests/requirements.txt); or \
         `pip install dnspython` and set FAULTLINE_PYTHON"
    );
    let faultd = faultd_with(
        "routes:\n  any: { path: /** }\n\
         dns:\n  names:\n    pricing.internal: { a: [127.0.0.3, 127.0.0.4], ttl: 45s }\n    \
         gone.internal: { nxdomain: 100% }\n    broken.internal: { servfail: 100% }\n    \
         silent.internal: { no_answer: 100% }\n",
    )
    .await;
    let port = faultd.dns_addr().unwrap().port().to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .args(["-c", DNSPYTHON, &port])
            .args([
                "pricing.internal",
                "gone.internal",
                "broken.internal",
                "silent.internal",
            ])
            .output()
            .expect("python runs")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        vec![
            "pricing.internal ok 45 127.0.0.3,127.0.0.4",
            "gone.internal nxdomain",
            "broken.internal servfail",
            "silent.internal timeout",
        ]
    );
    faultd.shutdown().await;
}
