//! A route served by several instances (`instances: 3`): each instance listens on its own address, a phase can
//! make one instance sick while the others stay healthy, and what each instance records adds up exactly to the
//! route's recording (counts, histograms, the in-flight series).

use crate::common;

use std::time::Duration;

use common::{get, wait_for};
use faultd::{Config, Options, RouteBucket, RouteRecording};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

const SICK_SECOND: &str = "
seed: 7
routes:
  pricing: { path: /price/*, instances: 3 }
phases:
  - { name: sick, at: 0s, routes: { pricing: { instance: 2, errors: [ { share: 100%, status: 503 } ] } } }
";

/// A faultd of `yaml` (without precise delays) whose schedule has started.
pub(crate) async fn start(yaml: &str) -> faultd::Faultd {
    let config = Config::from_yaml(yaml, "instances.yaml").unwrap();
    let f = faultd::start(
        config,
        Options {
            precise_delays: false,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    f.start_schedule(Instant::now());
    f
}

#[tokio::test]
async fn a_phase_on_one_instance_fails_that_instance_alone() {
    let f = start(SICK_SECOND).await;
    let addrs = f.instance_addrs("pricing").to_vec();
    assert_eq!(addrs.len(), 3);
    assert!(addrs.iter().all(|a| *a != f.data_addr()));
    assert_eq!(
        f.instance_urls("pricing")[1],
        format!("http://{}", addrs[1])
    );
    for (i, addr) in addrs.iter().enumerate() {
        for n in 0..5 {
            let want = if i == 1 { 503 } else { 200 };
            assert_eq!(
                get(*addr, &format!("/price/{n}")).await.status(),
                Some(want),
                "instance {}",
                i + 1
            );
        }
        // An instance's listener serves its route only.
        assert_eq!(get(*addr, "/other").await.status(), Some(404));
    }
    // The route's own listener keeps the route's behaviour: the phase set one instance.
    assert_eq!(get(f.data_addr(), "/price/1").await.status(), Some(200));

    let r = f.recording();
    let route = &r.routes["pricing"];
    assert_eq!(route.instances.len(), 3);
    let calls: Vec<u64> = route.instances.iter().map(|i| i.totals.arrivals).collect();
    assert_eq!(calls, [5, 5, 5]);
    assert_eq!(route.instances[1].totals.completed.c5xx, 5);
    assert_eq!(route.instances[0].totals.completed.c2xx, 5);
    // The 15 instance calls and the one on the route's own address.
    assert_eq!(route.totals.arrivals, 16);
    assert_eq!(route.totals.completed.c5xx, 5);
    assert_eq!(r.unmatched, 3);
    f.shutdown().await;
}

/// The instances' buckets, added field by field over the counts.
fn summed(instances: &[RouteRecording]) -> Vec<RouteBucket> {
    let n = instances.iter().map(|i| i.buckets.len()).max().unwrap_or(0);
    (0..n)
        .map(|b| {
            let mut sum = RouteBucket::default();
            for i in instances {
                if let Some(bucket) = i.buckets.get(b) {
                    sum.arrivals += bucket.arrivals;
                    sum.completed.c2xx += bucket.completed.c2xx;
                    sum.completed.c5xx += bucket.completed.c5xx;
                    sum.hangs += bucket.hangs;
                    sum.in_flight_mean += bucket.in_flight_mean;
                }
            }
            sum
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instances_recordings_add_up_exactly_to_the_routes() {
    let f = start(
        "
routes:
  pricing: { path: /price/*, instances: 3, latency: { fixed: 2ms } }
phases:
  - { name: held, at: 0s, routes: { pricing: { hang: 100% } } }
  - { name: answered, at: 1h }
",
    )
    .await;
    let addrs = f.instance_addrs("pricing").to_vec();
    // 3, 2 and 1 calls held on instances 1, 2 and 3: six at once on the route.
    let mut held = Vec::new();
    for (addr, count) in addrs.iter().zip([3, 2, 1]) {
        for n in 0..count {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET /price/{n} HTTP/1.1\r\nHost: faultd\r\n\r\n").as_bytes())
                .await
                .unwrap();
            held.push(s);
        }
    }
    wait_for("six calls in flight", || f.in_flight() == 6).await;
    // Three whole buckets with the six held and nothing moving.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = f.recording();
    let route = &r.routes["pricing"];
    let maxima: Vec<u64> = route.instances.iter().map(|i| i.max_in_flight).collect();
    assert_eq!(maxima, [3, 2, 1]);
    assert_eq!(route.max_in_flight, 6);
    let sum = summed(&route.instances);
    assert_eq!(sum.len(), route.buckets.len());
    for (b, (mine, theirs)) in route.buckets.iter().zip(&sum).enumerate() {
        assert_eq!(mine.arrivals, theirs.arrivals, "bucket {b}");
        assert!(
            (mine.in_flight_mean - theirs.in_flight_mean).abs() < 1e-6,
            "bucket {b}: route {} instances {}",
            mine.in_flight_mean,
            theirs.in_flight_mean
        );
    }
    // The route's maximum per bucket is that of the summed series: the last full bucket held all six.
    assert_eq!(route.buckets[route.buckets.len() - 2].in_flight_max, 6);
    drop(held);
    wait_for("every held call to leave", || f.in_flight() == 0).await;
    let r = f.recording();
    let route = &r.routes["pricing"];
    assert_eq!(route.totals.hangs, 6);
    let hangs: u64 = route.instances.iter().map(|i| i.totals.hangs).sum();
    assert_eq!(hangs, 6);
    f.shutdown().await;
}

#[tokio::test]
async fn the_instances_latency_histograms_add_up_to_the_routes() {
    let f = start(
        "
routes:
  pricing: { path: /price/*, instances: 3, latency: { fixed: 1ms } }
",
    )
    .await;
    let addrs = f.instance_addrs("pricing").to_vec();
    for (addr, count) in addrs.iter().zip([4, 2, 3]) {
        for n in 0..count {
            assert_eq!(get(*addr, &format!("/price/{n}")).await.status(), Some(200));
        }
    }
    let r = f.recording();
    let route = &r.routes["pricing"];
    let mut sum = faultd::recorder::new_histogram();
    for i in &route.instances {
        for h in i.latency.values() {
            sum.add(h).unwrap();
        }
    }
    let whole = &route.latency[faultd::BEFORE_FIRST_PHASE];
    assert_eq!(sum.len(), 9);
    assert_eq!(
        sum.iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect::<Vec<_>>(),
        whole
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect::<Vec<_>>()
    );
    let c2xx: u64 = route
        .instances
        .iter()
        .map(|i| i.totals.completed.c2xx)
        .sum();
    assert_eq!(c2xx, route.totals.completed.c2xx);
    f.shutdown().await;
}

#[test]
fn an_instance_a_route_does_not_have_is_refused() {
    let refused = |yaml: &str| {
        Config::from_yaml(yaml, "instances.yaml")
            .unwrap_err()
            .to_string()
    };
    let fourth = refused(
        "routes: { pricing: { path: /p, instances: 3 } }\nphases: [ { name: sick, at: 1s, routes: { pricing: { instance: 4, errors: [ { share: 100%, status: 503 } ] } } } ]\n",
    );
    assert!(fourth.contains("instances 1 to 3"), "{fourth}");
    let none = refused(
        "routes: { pricing: { path: /p } }\nphases: [ { name: sick, at: 1s, routes: { pricing: { instance: 1, errors: [ { share: 100%, status: 503 } ] } } } ]\n",
    );
    assert!(none.contains("has no instances"), "{none}");
    let tcp = refused(
        "routes: { db: { tcp: { upstream: 127.0.0.1:5432 }, instances: 2 } }\nphases: [ { name: sick, at: 1s, routes: { db: { instance: 3, toxics: [ { type: reset_peer } ] } } } ]\n",
    );
    assert!(tcp.contains("instances 1 to 2"), "{tcp}");
    let zero = refused("routes: { pricing: { path: /p, instances: 0 } }\n");
    assert!(zero.contains("outside 1..64"), "{zero}");
}

#[test]
fn a_phase_on_one_instance_reads_and_writes_back_as_written() {
    let config = Config::from_yaml(SICK_SECOND, "instances.yaml").unwrap();
    let set = &config.phases[0].routes["pricing"];
    assert!(matches!(set, faultd::PhaseRoute::Instance(2, _)));
    let json = serde_json::to_vec(&config).unwrap();
    let again = Config::from_json(&json, "again.json").unwrap();
    assert_eq!(again, config);
    // A misspelt field beside `instance` is still refused, in its place.
    let typo = Config::from_yaml(
        "routes: { pricing: { path: /p, instances: 2 } }\nphases: [ { name: sick, at: 1s, routes: { pricing: { instance: 1, erors: [] } } } ]\n",
        "typo.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(typo.contains("erors"), "{typo}");
}
