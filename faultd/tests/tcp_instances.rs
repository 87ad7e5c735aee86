//! A TCP route served by several instances (`instances: 3`): each instance is a listener of its own in front of
//! the route's upstream, a phase can give one instance toxics while the others and the route's own listener stay
//! clean, what each instance records adds up exactly to the route's recording, and the instances go down and come
//! back with the route.

use crate::tcp::{connect, round_trip, Echo};

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

/// The latency the sick instance adds to every chunk: a round trip through it takes at least this long, and one
/// through a clean listener has no reason to come near it.
const SICK_MS: u64 = 400;

async fn start(upstream: std::net::SocketAddr) -> faultd::Faultd {
    crate::instances::start(&format!(
        "seed: 7
routes:
  db: {{ tcp: {{ upstream: '{upstream}' }}, instances: 3 }}
phases:
  - {{ name: sick, at: 0s, routes: {{ db: {{ instance: 2, toxics: [ {{ type: latency, attributes: {{ latency: {SICK_MS} }} }} ] }} }} }}
"
    ))
    .await
}

/// Waits (at most 5 s) until the route and every instance hold no connection.
async fn wait_all_closed(f: &faultd::Faultd) -> faultd::tcp::TcpRouteRecording {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = f.tcp_recording().remove("db").unwrap();
        if r.open == 0 && r.instances.iter().all(|i| i.open == 0) {
            return r;
        }
        assert!(Instant::now() < deadline, "connections still open: {r:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phase_on_one_tcp_instance_slows_that_instance_alone_and_instances_add_up_to_the_route() {
    let echo = Echo::start().await;
    let f = start(echo.addr).await;
    let own = f.tcp().get("db").unwrap().listen.parse().unwrap();
    let addrs = f.instance_addrs("db").to_vec();
    assert_eq!(addrs.len(), 3);
    assert_eq!(addrs, f.tcp().instance_addrs("db"));
    assert!(
        !addrs.contains(&own),
        "each instance listens on its own port"
    );
    // Connections per listener: the route's own 1, instance 1 two, instance 2 one, instance 3 none, all open at
    // once so that the route's maximum is the sum.
    let plan: [(std::net::SocketAddr, usize); 3] = [(own, 1), (addrs[0], 2), (addrs[1], 1)];
    let mut open = Vec::new();
    for (addr, n) in plan {
        for _ in 0..n {
            let mut s = connect(addr).await.unwrap();
            let took = round_trip(&mut s, b"ping").await;
            let sick = addr == addrs[1];
            assert_eq!(
                took >= Duration::from_millis(SICK_MS),
                sick,
                "a round trip through {addr} took {took:?} (instance 2 alone has {SICK_MS} ms of latency)"
            );
            open.push(s);
        }
    }
    for mut s in open {
        s.shutdown().await.unwrap();
    }
    let route = wait_all_closed(&f).await;
    let attempts: Vec<u64> = route.instances.iter().map(|i| i.totals.attempts).collect();
    assert_eq!(attempts, [2, 1, 0]);
    assert_eq!(
        route.totals.attempts, 4,
        "the route counts its own listener's and its instances'"
    );
    assert_eq!(
        route.max_open, 4,
        "the route's maximum is of connections open at once on all its listeners"
    );
    let up: u64 = route
        .instances
        .iter()
        .map(|i| i.totals.bytes_upstream)
        .sum();
    assert_eq!(
        route.totals.bytes_upstream,
        up + 4,
        "own listener's 4 bytes plus the instances'"
    );
    assert_eq!(route.instances[1].totals.toxics.get("latency"), Some(&1));
    assert_eq!(route.totals.toxics.get("latency"), Some(&1));
    assert_eq!(route.instances[0].totals.toxics.get("latency"), None);
    // The same shape as an HTTP route's: instances under the route, so the runner's instance expectations read
    // TCP routes alike.
    let calls = route.as_calls();
    assert_eq!(calls.instances.len(), 3);
    assert_eq!(calls.instances[0].totals.arrivals, 2);
    assert_eq!(calls.totals.arrivals, 4);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_instances_go_down_and_come_back_with_their_route() {
    let echo = Echo::start().await;
    let f = start(echo.addr).await;
    let addrs = f.instance_addrs("db").to_vec();
    let down = faultd::tcp::ProxyUpdate {
        enabled: Some(false),
        ..Default::default()
    };
    f.tcp().update("db", down).unwrap();
    for a in &addrs {
        assert!(
            connect(*a).await.is_err(),
            "instance {a} still accepts while its route is down"
        );
    }
    let up = faultd::tcp::ProxyUpdate {
        enabled: Some(true),
        ..Default::default()
    };
    f.tcp().update("db", up).unwrap();
    let mut s = connect(addrs[2])
        .await
        .expect("instance 3 is back on its port");
    round_trip(&mut s, b"back").await;
    f.shutdown().await;
}
