//! A removed toxic stops acting at once on a connection that keeps streaming, however often toxics come and go:
//! the toxic list and the bytes on the wire never disagree for longer than one wait of the toxic's own. A suite
//! that removes a `bandwidth` toxic and then measures its service must measure the service, not the toxic.

use crate::tcp;

use std::time::Duration;

use serde_json::json;
use tcp::{connect, faultd, firehose, route};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Add-and-remove cycles: each adds a toxic to a connection in full flow, lets it act for 0-3 ms, removes it and
/// checks the flow comes back at full rate.
const CYCLES: usize = 2_000;
/// What must come through after each removal: at the slowest toxic's pace (1,000 B/s) this would take over
/// 17 minutes, at loopback's pace a few milliseconds.
const AFTER_REMOVAL: u64 = 1 << 20;
/// How long the flow may take to come back after a removal: generous for a loaded 2-core machine, and still 500
/// times shorter than the throttled flow would need.
const COMES_BACK_WITHIN: Duration = Duration::from_secs(2);

/// Toxics whose effect is a wait inside the delivery of a chunk: a bandwidth pause, a slicer's pause between
/// slices, a latency hold. Each alone keeps a 32 KB chunk from its reader for 10 s to 30 s.
fn toxics() -> [serde_json::Value; 3] {
    [
        json!({"name": "t", "type": "bandwidth", "attributes": {"rate": 1}}),
        json!({"name": "t", "type": "slicer",
               "attributes": {"average_size": 1, "size_variation": 0, "delay": 10000}}),
        json!({"name": "t", "type": "latency", "attributes": {"latency": 10000}}),
    ]
}

/// Reads `bytes` from `s`; the time it took, or None when `within` passed first (with what was read).
async fn read_bytes(s: &mut TcpStream, bytes: u64, within: Duration) -> Result<Duration, u64> {
    let start = Instant::now();
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    while got < bytes {
        match tokio::time::timeout_at(start + within, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got += n as u64,
            Ok(Ok(_)) => panic!("the connection closed after {got} bytes"),
            Ok(Err(e)) => panic!("read failed after {got} bytes: {e}"),
            Err(_) => return Err(got),
        }
    }
    Ok(start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_toxic_stops_acting_on_a_streaming_connection_in_every_one_of_2000_cycles() {
    let upstream = firehose().await;
    let f = faultd(7).await;
    let addr = route(&f, "stream", upstream);
    let mut s = connect(addr).await.unwrap();
    read_bytes(&mut s, AFTER_REMOVAL, COMES_BACK_WITHIN)
        .await
        .expect("the firehose streams before any toxic");

    let toxics = toxics();
    let mut slowest = Duration::ZERO;
    for cycle in 0..CYCLES {
        let toxic = &toxics[cycle % toxics.len()];
        f.tcp()
            .add_toxic("stream", serde_json::from_value(toxic.clone()).unwrap())
            .unwrap();
        // Let the toxic take hold of the chunk in flight (or not yet, at 0 ms): the removal must land in every
        // moment of a delivery.
        let hold = Duration::from_micros((cycle % 4) as u64 * 1000);
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        f.tcp().remove_toxic("stream", "t").unwrap();
        assert!(f.tcp().toxics("stream").unwrap().is_empty());
        match read_bytes(&mut s, AFTER_REMOVAL, COMES_BACK_WITHIN).await {
            Ok(took) => slowest = slowest.max(took),
            Err(got) => panic!(
                "cycle {cycle}: the toxic list is empty, but {COMES_BACK_WITHIN:?} after removing {} only \
                 {got} bytes came through",
                toxic["type"]
            ),
        }
    }
    eprintln!("{CYCLES} cycles; the slowest return to full flow: {slowest:?}");
    assert_eq!(
        f.tcp_recording()["stream"].totals.attempts,
        1,
        "one connection streamed through every cycle"
    );
    f.shutdown().await;
}
