//! The recorder on synthetic events: phases, buckets, conservation, the progress line and the three ways of
//! keeping the time series.

use super::*;
use crate::recording::{decode_histogram, Measure};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[test]
fn requests_land_in_the_phase_of_their_intended_time_and_buckets_split_intended_from_completion() {
    let phases = vec![
        ("healthy".to_string(), ms(0)),
        ("brownout".to_string(), ms(1000)),
    ];
    let r = Recorder::new(&phases, ms(100), ms(2000), Series::Keep);
    r.sent(ms(950), ms(951));
    r.sent(ms(1010), ms(1012));
    r.dropped(ms(1020));
    r.completed(Outcome::Ok, ms(950), ms(950), Some(ms(951)), ms(1250));
    r.completed(
        Outcome::Fallback,
        ms(1010),
        ms(1010),
        Some(ms(1012)),
        ms(1270),
    );
    let rec = r.recording(Model::Open, false);

    assert_eq!(rec.phases[0].counts.ok, 1);
    assert_eq!(rec.phases[1].counts.fallback, 1);
    assert_eq!(rec.phases[1].counts.dropped, 1);
    assert!(!rec.phases[1].classes.contains_key(&Outcome::Dropped));
    let h = &rec.phases[0].classes[&Outcome::Ok];
    assert_eq!(
        h.corrected.0.max(),
        h.corrected.0.highest_equivalent(300_000_000)
    );
    assert_eq!(
        h.uncorrected.0.max(),
        h.uncorrected.0.highest_equivalent(299_000_000)
    );
    assert_eq!(
        h.send_lag.0.max(),
        h.send_lag.0.highest_equivalent(1_000_000)
    );

    assert_eq!(rec.buckets.len(), 20);
    assert_eq!((rec.buckets[9].intended, rec.buckets[9].sent), (1, 1));
    assert_eq!(
        (
            rec.buckets[10].intended,
            rec.buckets[10].sent,
            rec.buckets[10].dropped
        ),
        (2, 1, 1)
    );
    assert_eq!(rec.buckets[12].completed.ok, 1);
    assert_eq!(rec.buckets[12].completed.fallback, 1);
    assert_eq!(rec.buckets[12].in_flight, 2);
    assert_eq!(
        rec.buckets[11].in_flight, 2,
        "a bucket without events carries the level"
    );
    assert_eq!(rec.buckets[13].in_flight, 0);
    let interval = decode_histogram(rec.buckets[12].interval_histogram.as_ref().unwrap()).unwrap();
    assert_eq!(interval.len(), 2);
    let lat = rec.buckets[12].latency.unwrap();
    assert!(
        lat.p50.get() >= ms(259) && lat.max.get() <= ms(301),
        "{lat:?}"
    );
    assert!(rec.conservation.holds);
    assert_eq!(
        (rec.conservation.sent, rec.conservation.sum_of_classes),
        (3, 3)
    );
    assert_eq!(
        rec.histogram(Measure::Corrected, Some("brownout"), |_| true)
            .len(),
        1
    );
}

#[test]
fn conservation_counts_requests_still_in_flight() {
    let r = Recorder::new(&[], ms(100), ms(1000), Series::Keep);
    for i in 0..5 {
        r.sent(ms(i), ms(i));
    }
    r.completed(Outcome::Timeout, ms(0), ms(0), None, ms(500));
    assert_eq!(r.in_flight(), 4);
    let rec = r.recording(Model::Open, true);
    assert_eq!(
        rec.conservation,
        Conservation {
            holds: true,
            sent: 5,
            sum_of_classes: 1,
            in_flight: 4
        }
    );
    assert_eq!(rec.still_in_flight, 4);
    let timeouts = &rec.phases[0].classes[&Outcome::Timeout];
    assert_eq!(timeouts.corrected.0.len(), 1);
    assert_eq!(
        timeouts.uncorrected.0.len(),
        0,
        "never sent, so no service time"
    );
}

#[test]
fn latency_counts_from_when_the_generator_was_ready_and_its_lateness_is_kept_apart() {
    let r = Recorder::new(&[], ms(100), ms(2000), Series::Keep);
    // Due at 100 ms, ready at 140 ms (the generator late by 40 ms), sent at 145 ms, answered at 150 ms.
    r.sent(ms(100), ms(140));
    r.completed(Outcome::Ok, ms(100), ms(140), Some(ms(145)), ms(150));
    // Due at 300 ms and ready on time: every millisecond until the answer at 320 ms counts.
    r.sent(ms(300), ms(300));
    r.completed(Outcome::Ok, ms(300), ms(300), Some(ms(310)), ms(320));
    let rec = r.recording(Model::Open, false);
    let at = |m, phase_ms: u64| {
        let h = rec.histogram(m, None, |_| true);
        h.count_between(0, h.highest_equivalent(phase_ms * 1_000_000))
    };
    // Corrected: 10 ms and 20 ms, never the 50 ms from the first one's intended time.
    let corrected = rec.histogram(Measure::Corrected, None, |_| true);
    assert_eq!(corrected.max(), corrected.highest_equivalent(20_000_000));
    assert_eq!(at(Measure::Corrected, 10), 1);
    let late = rec.histogram(Measure::Late, None, |_| true);
    assert_eq!(late.max(), late.highest_equivalent(40_000_000));
    assert_eq!(at(Measure::Late, 0), 1, "the second was on time");
    // The send lag still shows every delay before the send, the generator's included.
    let lag = rec.histogram(Measure::SendLag, None, |_| true);
    assert_eq!(lag.max(), lag.highest_equivalent(45_000_000));
    // The time series holds the same corrected latencies.
    let bucket = rec.buckets[1].latency.unwrap();
    assert_eq!(
        bucket.max.get(),
        Duration::from_nanos(corrected.highest_equivalent(10_000_000))
    );
}

#[test]
fn progress_reports_the_p99_of_the_last_second_only() {
    let r = Recorder::new(&[], ms(100), ms(10_000), Series::Keep);
    for i in 0..10u64 {
        r.sent(ms(i * 100), ms(i * 100));
        r.completed(
            Outcome::Ok,
            ms(i * 100),
            ms(i * 100),
            Some(ms(i * 100)),
            ms(i * 100 + 50),
        );
    }
    // A slow one long ago, then only fast ones for more than a second.
    r.sent(ms(1000), ms(1000));
    r.completed(Outcome::Ok, ms(0), ms(0), Some(ms(1000)), ms(1020));
    for i in 0..20u64 {
        let t = ms(2000 + i * 100);
        r.sent(t, t);
        r.completed(Outcome::Ok, t, t, Some(t), t + ms(10));
    }
    let p = r.progress(ms(4000));
    assert_eq!(p.completed, 31);
    assert_eq!(p.in_flight, 0);
    let p99 = p.p99_last_second.unwrap().get();
    assert!(p99 >= ms(9) && p99 <= ms(11), "{p99:?}");
}

/// Ten minutes at 20 requests per 100 ms bucket, each answered 30 ms later, with one stall of 2 s where
/// nothing completes.
fn ten_minutes(r: &Recorder, mut after_each_bucket: impl FnMut(&Recorder, u64)) {
    for b in 0..6000u64 {
        if (3000..3020).contains(&b) {
            after_each_bucket(r, b);
            continue;
        }
        for k in 0..20u64 {
            let t = ms(b * 100 + k * 5);
            r.sent(t, t);
            r.completed(Outcome::Ok, t, t, Some(t), t + ms(30));
        }
        after_each_bucket(r, b);
    }
}

#[test]
fn a_streamed_series_keeps_memory_to_a_few_live_buckets_and_sends_every_bucket_once_in_order() {
    let (tx, rx) = std::sync::mpsc::channel();
    let r = Recorder::new(&[], ms(100), ms(600_000), Series::Stream(tx));
    let mut most_live = 0;
    ten_minutes(&r, |r, _| most_live = most_live.max(r.lock().buckets.len()));
    // A second of slack (10 buckets) plus the bucket of each clock.
    assert!(most_live <= 13, "{most_live} live buckets");
    assert!(
        rx.try_iter().count() > 5900,
        "final buckets leave during the run"
    );

    let rec = r.recording(Model::Open, false);
    assert!(rec.buckets.is_empty(), "a streamed series is not also kept");
    assert!(rec.conservation.holds);
    // The sender went with the recording: the receiver sees the end after the last bucket.
    let rest: Vec<Bucket> = rx.iter().collect();
    assert!(
        rest.len() < 20,
        "{} buckets were left for the end",
        rest.len()
    );
}

#[test]
fn streamed_and_kept_series_are_the_same_buckets() {
    let kept = Recorder::new(&[], ms(100), ms(600_000), Series::Keep);
    ten_minutes(&kept, |_, _| {});
    let kept = kept.recording(Model::Open, false).buckets;

    let (tx, rx) = std::sync::mpsc::channel();
    let streamed = Recorder::new(&[], ms(100), ms(600_000), Series::Stream(tx));
    ten_minutes(&streamed, |_, _| {});
    streamed.recording(Model::Open, false);
    let streamed: Vec<Bucket> = rx.iter().collect();

    assert_eq!(
        kept.len(),
        6001,
        "the last answers come back 25 ms after the end"
    );
    for (i, b) in kept.iter().enumerate() {
        assert_eq!(b.start.get(), ms(i as u64 * 100));
    }
    assert_eq!(kept, streamed);
    assert_eq!(kept.iter().map(|b| b.sent).sum::<u64>(), 5980 * 20);
    assert_eq!(kept[3005].completed.ok, 0, "the stall");
    assert!(kept[3005].latency.is_none());
    assert_eq!(kept[10].completed.ok, 20);
    assert_eq!(kept[10].in_flight, 1);
}

#[test]
fn a_discarded_series_records_everything_else() {
    let r = Recorder::new(&[], ms(100), ms(600_000), Series::Discard);
    let mut most_live = 0;
    ten_minutes(&r, |r, _| most_live = most_live.max(r.lock().buckets.len()));
    assert!(most_live <= 13, "{most_live} live buckets");
    let rec = r.recording(Model::Open, false);
    assert!(rec.buckets.is_empty());
    assert_eq!(rec.totals.ok, 5980 * 20);
    assert_eq!(
        rec.histogram(Measure::Corrected, None, |_| true).len(),
        5980 * 20
    );
}

#[test]
fn an_event_stamped_for_a_final_bucket_counts_in_the_oldest_live_one() {
    let r = Recorder::new(&[], ms(100), ms(10_000), Series::Keep);
    for i in 0..50u64 {
        r.sent(ms(i * 100), ms(i * 100));
        r.completed(
            Outcome::Ok,
            ms(i * 100),
            ms(i * 100),
            Some(ms(i * 100)),
            ms(i * 100 + 10),
        );
    }
    let first_live = r.lock().first_live;
    assert!(first_live >= 30, "buckets up to {first_live} are final");
    // A dispatch stamped 4 s ago, from a thread that lost the CPU between its clock and the lock.
    r.sent(ms(1000), ms(1000));
    r.completed(Outcome::Ok, ms(1000), ms(1000), Some(ms(1000)), ms(1005));
    let rec = r.recording(Model::Open, false);
    assert!(rec.conservation.holds);
    assert_eq!(rec.buckets.iter().map(|b| b.sent).sum::<u64>(), 51);
    assert_eq!(rec.buckets[10].sent, 1, "a final bucket is not changed");
    assert_eq!(rec.buckets[first_live].sent, 2);
    assert_eq!(rec.buckets.len(), 100);
}

#[test]
fn only_the_phases_written_to_last_stay_decoded_and_a_packed_phase_loses_nothing() {
    // Twelve phases of a second; every request takes 300 ms, and one of phase 0 ends after phase 9 began.
    let phases: Vec<_> = (0..12u64)
        .map(|i| (format!("p{i}"), ms(i * 1000)))
        .collect();
    let r = Recorder::new(&phases, ms(100), ms(12_000), Series::Discard);
    let mut most_live = 0;
    for i in 0..120u64 {
        let at = ms(i * 100);
        r.sent(at, at);
        let outcome = if i % 2 == 0 {
            Outcome::Ok
        } else {
            Outcome::Timeout
        };
        r.completed(outcome, at, at, Some(at + ms(1)), at + ms(300) + ms(i));
        let s = r.lock();
        most_live = most_live.max(s.phases.all.iter().filter(|p| p.is_live()).count());
    }
    r.sent(ms(10), ms(10));
    r.completed(Outcome::Ok, ms(10), ms(10), Some(ms(11)), ms(9_500));
    assert_eq!(most_live, phase::LIVE);
    let live: Vec<_> = r.lock().phases.all.iter().map(|p| p.is_live()).collect();
    assert_eq!(live.iter().filter(|l| **l).count(), phase::LIVE);
    assert!(live[0], "the late request's phase was decoded again");

    let rec = r.recording(Model::Open, false);
    for (i, phase) in rec.phases.iter().enumerate() {
        let ok = &phase.classes[&Outcome::Ok].corrected.0;
        let late = usize::from(i == 0);
        assert_eq!(ok.len(), 5 + late as u64, "{}", phase.name);
        let slowest = if i == 0 {
            9_490
        } else {
            300 + i as u64 * 10 + 8
        };
        assert_eq!(
            ok.max(),
            ok.highest_equivalent(slowest * 1_000_000),
            "{}",
            phase.name
        );
        let timeouts = &phase.classes[&Outcome::Timeout];
        assert_eq!(timeouts.corrected.0.len(), 5);
        assert_eq!(
            timeouts.send_lag.0.max(),
            timeouts.send_lag.0.highest_equivalent(1_000_000)
        );
        assert_eq!(phase.counts.timeout, 5);
    }
    assert!(rec.conservation.holds);
}
