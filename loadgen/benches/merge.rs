//! How long the runner takes to merge one bucket of a distributed run: `cargo bench -p loadgen --bench merge`.
//!
//! Four agents' buckets of 100 ms at 5,000 requests per second each (500 latencies from 0.1 to 2 ms), whose
//! interval histograms once held a 5 s timeout (a recorder reuses its histograms, so their range stays grown), merged
//! 5,000 times; prints the median and the 99th percentile. The runner's own figure in a run (result.json's
//! `distributed.bucket_merge_p99_ms`) adds whatever else its core was doing.

use std::time::{Duration, Instant};

use loadgen::recording::{encode_histogram, new_histogram};
use loadgen::Bucket;

fn bucket(agent: u64) -> Bucket {
    let mut h = new_histogram();
    let _ = h.record(5_000_000_000);
    h.reset();
    for i in 0..500u64 {
        let _ = h.record(100_000 + (i * 7919 + agent * 13) % 1_900_000);
    }
    Bucket {
        sent: 500,
        interval_histogram: Some(encode_histogram(&h)),
        ..Bucket::default()
    }
}

fn main() {
    for agents in [2u64, 4, 8] {
        let parts: Vec<Bucket> = (0..agents).map(bucket).collect();
        let mut times: Vec<Duration> = (0..5_000)
            .map(|_| {
                let started = Instant::now();
                let merged = Bucket::merge(parts.iter()).expect("the buckets decode");
                let took = started.elapsed();
                std::hint::black_box(merged);
                took
            })
            .collect();
        times.sort();
        println!(
            "merging one bucket of {agents} agents: p50 {:.3} ms, p99 {:.3} ms",
            times[times.len() / 2].as_secs_f64() * 1e3,
            times[times.len() * 99 / 100].as_secs_f64() * 1e3
        );
    }
}
