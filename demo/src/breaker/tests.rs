//! The breaker's state machine as a specification: every transition, threshold and mistake switch, driven by
//! explicit instants under paused tokio time.

use std::collections::BTreeSet;
use std::time::Duration;

use faultline_units::{Dur, Share};
use tokio::time::Instant;
use BreakerState::{Closed, HalfOpen, Open};

use super::*;
use crate::config::Mistake;
use crate::settings::BreakerConfig;

const MS: Duration = Duration::from_millis(1);
const FAST: Duration = Duration::from_millis(10);

// Seed 000's breaker as the demo runs it: 50% over 10 s, at least 20 calls, open 30 s, one probe, one
// success closes; slow over 1 s counts at 100%.
use crate::operation::seed_000_breaker as seed_000;

fn breaker(config: &BreakerConfig, mistakes: &[Mistake]) -> Breaker {
    Breaker::new(Policy::new(config, &mistakes.iter().copied().collect()))
}

/// Makes one call at `now` that ends at once with `outcome`; returns the admission and the changes.
fn call(b: &mut Breaker, now: Instant, outcome: Outcome) -> (bool, Vec<StateChange>) {
    let (admission, change) = b.try_acquire(now);
    let mut changes: Vec<StateChange> = change.into_iter().collect();
    match admission {
        Ok(permit) => {
            changes.extend(b.record(now, permit, outcome));
            (true, changes)
        }
        Err(_) => (false, changes),
    }
}

/// `n` calls spread `gap` apart from `start`; returns the instant after the last and every change.
fn calls(
    b: &mut Breaker,
    start: Instant,
    gap: Duration,
    n: u32,
    outcome: Outcome,
) -> (Instant, Vec<StateChange>) {
    let mut now = start;
    let mut changes = Vec::new();
    for _ in 0..n {
        changes.extend(call(b, now, outcome).1);
        now += gap;
    }
    (now, changes)
}

fn trip(b: &mut Breaker, now: Instant) -> Instant {
    let (next, changes) = calls(b, now, MS, b.policy().min_calls, Outcome::failure(FAST));
    assert_eq!(b.state(), Open, "tripping helper: {changes:?}");
    next
}

#[tokio::test(start_paused = true)]
async fn opens_within_window_when_half_the_calls_fail() {
    let mut b = breaker(&seed_000(), &[]);
    let t0 = Instant::now();
    let (now, changes) = calls(&mut b, t0, 100 * MS, 10, Outcome::success(FAST));
    assert!(changes.is_empty());
    let (_, changes) = calls(&mut b, now, 100 * MS, 9, Outcome::failure(FAST));
    assert!(changes.is_empty(), "19 calls are under the floor of 20");
    let (admitted, changes) = call(&mut b, t0 + 1_900 * MS, Outcome::failure(FAST));
    assert!(admitted);
    assert_eq!(
        changes,
        vec![StateChange {
            from: Closed,
            to: Open,
            at: t0 + 1_900 * MS
        }],
        "10 of 20 is 50%"
    );
}

#[tokio::test(start_paused = true)]
async fn stays_closed_just_under_the_failure_rate() {
    let mut b = breaker(&seed_000(), &[]);
    let t0 = Instant::now();
    // 11 successes then 9 failures: 45% of 20.
    let (now, _) = calls(&mut b, t0, MS, 11, Outcome::success(FAST));
    let (now, changes) = calls(&mut b, now, MS, 9, Outcome::failure(FAST));
    assert!(changes.is_empty());
    assert_eq!(
        b.window_counts(now),
        WindowCounts {
            calls: 20,
            failures: 9,
            slow: 0
        }
    );
    assert_eq!(b.state(), Closed);
}

#[tokio::test(start_paused = true)]
async fn never_opens_below_the_minimum_number_of_calls_even_at_full_failure() {
    let mut b = breaker(&seed_000(), &[]);
    let t0 = Instant::now();
    // Seed 000: 0.1 rps per instance is one call per 10 s window; run 5 minutes of failures.
    let (_, changes) = calls(&mut b, t0, 10_000 * MS, 30, Outcome::failure(FAST));
    assert!(changes.is_empty());
    assert_eq!(b.state(), Closed);
}

#[tokio::test(start_paused = true)]
async fn forgets_calls_older_than_the_window() {
    let mut b = breaker(&seed_000(), &[]);
    let t0 = Instant::now();
    let (_, changes) = calls(&mut b, t0, MS, 19, Outcome::failure(FAST));
    assert!(changes.is_empty());
    // 10 s later the 19 failures have left the window: one more failure is 1 call, under the floor.
    let (_, changes) = call(&mut b, t0 + 10_018 * MS, Outcome::failure(FAST));
    assert!(changes.is_empty());
    assert_eq!(b.window_counts(t0 + 10_018 * MS).calls, 1);
    // Whereas inside the window the 20th failure trips it.
    let mut b = breaker(&seed_000(), &[]);
    calls(&mut b, t0, MS, 19, Outcome::failure(FAST));
    let (_, changes) = call(&mut b, t0 + 9_000 * MS, Outcome::failure(FAST));
    assert_eq!(changes.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_shorter_window_needs_the_calls_closer_together() {
    let mut config = seed_000();
    config.window = Dur::from_millis(1_000);
    let mut b = breaker(&config, &[]);
    let t0 = Instant::now();
    // 20 failures 100 ms apart span 1.9 s: never 20 in one second.
    let (_, changes) = calls(&mut b, t0, 100 * MS, 20, Outcome::failure(FAST));
    assert!(changes.is_empty());
    assert_eq!(b.window_counts(t0 + 1_900 * MS).calls, 10);
}

#[tokio::test(start_paused = true)]
async fn open_rejects_every_call_until_open_for_has_passed() {
    let mut b = breaker(&seed_000(), &[]);
    let t0 = Instant::now();
    let opened = trip(&mut b, t0) - MS;
    for offset in [0, 1, 15_000, 29_999] {
        let (admission, change) = b.try_acquire(opened + offset * MS);
        assert_eq!(admission, Err(Rejected { state: Open }), "at +{offset} ms");
        assert!(change.is_none());
    }
    let (admission, change) = b.try_acquire(opened + 30_000 * MS);
    assert_eq!(admission.unwrap().state, HalfOpen);
    assert_eq!(
        change,
        Some(StateChange {
            from: Open,
            to: HalfOpen,
            at: opened + 30_000 * MS
        })
    );
}

#[tokio::test(start_paused = true)]
async fn open_for_sets_the_wait_before_half_open() {
    let mut config = seed_000();
    config.open_for = Dur::from_millis(5_000);
    let mut b = breaker(&config, &[]);
    let opened = trip(&mut b, Instant::now()) - MS;
    assert!(b.try_acquire(opened + 4_999 * MS).0.is_err());
    assert!(b.try_acquire(opened + 5_000 * MS).0.is_ok());
}

#[tokio::test(start_paused = true)]
async fn half_open_admits_only_the_permitted_probes_at_once() {
    let mut config = seed_000();
    config.half_open_calls = 3;
    config.close_after = 3;
    let mut b = breaker(&config, &[]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let now = opened + 30_000 * MS;
    let probes: Vec<Permit> = (0..3).map(|_| b.try_acquire(now).0.unwrap()).collect();
    for _ in 0..100 {
        assert_eq!(b.try_acquire(now).0, Err(Rejected { state: HalfOpen }));
    }
    // A finished probe frees its slot for the next one.
    assert_eq!(
        b.record(now + FAST, probes[0], Outcome::success(FAST)),
        None
    );
    assert!(b.try_acquire(now + FAST).0.is_ok());
    assert_eq!(
        b.try_acquire(now + FAST).0,
        Err(Rejected { state: HalfOpen })
    );
}

#[tokio::test(start_paused = true)]
async fn half_open_closes_after_the_required_successes_with_an_empty_window() {
    let mut config = seed_000();
    config.close_after = 3;
    let mut b = breaker(&config, &[]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let mut now = opened + 30_000 * MS;
    for i in 0..2 {
        let (admitted, changes) = call(&mut b, now, Outcome::success(FAST));
        assert!(admitted);
        assert!(
            changes.iter().all(|c| c.to == HalfOpen),
            "success {i} must not close: {changes:?}"
        );
        now += MS;
    }
    let (_, changes) = call(&mut b, now, Outcome::success(FAST));
    assert_eq!(
        changes,
        vec![StateChange {
            from: HalfOpen,
            to: Closed,
            at: now
        }]
    );
    assert_eq!(b.window_counts(now), WindowCounts::default());
}

#[tokio::test(start_paused = true)]
async fn one_failed_probe_reopens_for_another_open_for() {
    let mut config = seed_000();
    config.close_after = 3;
    let mut b = breaker(&config, &[]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let now = opened + 30_000 * MS;
    call(&mut b, now, Outcome::success(FAST));
    let (_, changes) = call(&mut b, now + MS, Outcome::failure(FAST));
    assert_eq!(
        changes,
        vec![StateChange {
            from: HalfOpen,
            to: Open,
            at: now + MS
        }]
    );
    assert!(
        b.try_acquire(now + MS + 29_999 * MS).0.is_err(),
        "the timer restarted at the failed probe"
    );
    assert!(b.try_acquire(now + MS + 30_000 * MS).0.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_slow_successful_probe_reopens() {
    let mut b = breaker(&seed_000(), &[]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let (_, changes) = call(&mut b, opened + 30_000 * MS, Outcome::success(1_500 * MS));
    assert_eq!(changes.last().unwrap().to, Open);
}

#[tokio::test(start_paused = true)]
async fn a_client_error_probe_counts_as_a_success() {
    let mut b = breaker(&seed_000(), &[]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let (_, changes) = call(&mut b, opened + 30_000 * MS, Outcome::client_error(FAST));
    assert_eq!(changes.last().unwrap().to, Closed);
}

#[tokio::test(start_paused = true)]
async fn client_errors_never_open_it() {
    let mut b = breaker(&seed_000(), &[]);
    let (_, changes) = calls(
        &mut b,
        Instant::now(),
        MS,
        1_000,
        Outcome::client_error(FAST),
    );
    assert!(changes.is_empty());
}

#[tokio::test(start_paused = true)]
async fn slow_successful_calls_open_it_at_the_slow_call_rate() {
    let mut config = seed_000();
    config.slow_call_rate = Share::from_fraction(0.3);
    config.slow_call_duration = Dur::from_millis(400);
    let mut b = breaker(&config, &[]);
    let t0 = Instant::now();
    // 14 fast + 5 slow (26%), then the 6th slow: 6 of 20 = 30%.
    let (now, _) = calls(&mut b, t0, MS, 14, Outcome::success(FAST));
    let (now, changes) = calls(&mut b, now, MS, 5, Outcome::success(500 * MS));
    assert!(changes.is_empty());
    let (_, changes) = call(&mut b, now, Outcome::success(500 * MS));
    assert_eq!(changes.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_exactly_at_the_slow_call_duration_is_not_slow() {
    let config = seed_000();
    let p = Policy::new(&config, &BTreeSet::new());
    assert_eq!(p.classify(Outcome::success(1_000 * MS)), (false, false));
    assert_eq!(p.classify(Outcome::success(1_001 * MS)), (false, true));
}

#[tokio::test(start_paused = true)]
async fn stale_outcomes_from_before_a_transition_are_ignored() {
    let mut b = breaker(&seed_000(), &[]);
    let t0 = Instant::now();
    // 200 calls in flight when it trips (seed 000's pool): they end after it opened.
    let slow: Vec<Permit> = (0..200).map(|_| b.try_acquire(t0).0.unwrap()).collect();
    trip(&mut b, t0);
    let opened = t0 + 19 * MS;
    let half_open = opened + 30_000 * MS;
    let probe = b.try_acquire(half_open).0.unwrap();
    for p in slow {
        assert_eq!(
            b.record(half_open, p, Outcome::failure(2_000 * MS)),
            None,
            "an old call is not a probe"
        );
    }
    assert_eq!(b.state(), HalfOpen);
    assert_eq!(
        b.record(half_open + FAST, probe, Outcome::success(FAST))
            .unwrap()
            .to,
        Closed
    );
}

#[tokio::test(start_paused = true)]
async fn a_released_probe_frees_its_slot_without_counting() {
    let mut b = breaker(&seed_000(), &[]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let now = opened + 30_000 * MS;
    let probe = b.try_acquire(now).0.unwrap();
    assert!(b.try_acquire(now).0.is_err());
    b.release(probe);
    assert_eq!(b.state(), HalfOpen);
    assert!(b.try_acquire(now).0.is_ok());
}

#[tokio::test(start_paused = true)]
async fn recovery_rate_closes_only_below_it_over_close_after_probes() {
    let mut config = seed_000();
    config.recovery_rate = Some(Share::from_fraction(0.2));
    config.close_after = 10;
    config.half_open_calls = 10;
    // One failure in ten probes is 10% < 20%: closes after the tenth.
    let mut b = breaker(&config, &[]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let mut now = opened + 30_000 * MS;
    let (_, changes) = call(&mut b, now, Outcome::failure(FAST));
    assert_eq!(
        changes.iter().map(|c| c.to).collect::<Vec<_>>(),
        vec![HalfOpen],
        "one failure does not reopen"
    );
    for _ in 0..8 {
        now += MS;
        assert!(call(&mut b, now, Outcome::success(FAST)).1.is_empty());
    }
    let (_, changes) = call(&mut b, now + MS, Outcome::success(FAST));
    assert_eq!(changes.last().unwrap().to, Closed);
    // Two failures in ten can no longer end below 20%: reopens at the second.
    let mut b = breaker(&config, &[]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let now = opened + 30_000 * MS;
    call(&mut b, now, Outcome::failure(FAST));
    call(&mut b, now + MS, Outcome::success(FAST));
    let (_, changes) = call(&mut b, now + 2 * MS, Outcome::failure(FAST));
    assert_eq!(
        changes,
        vec![StateChange {
            from: HalfOpen,
            to: Open,
            at: now + 2 * MS
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn a_closed_breaker_trips_again_on_a_fresh_window() {
    let mut b = breaker(&seed_000(), &[]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let now = opened + 30_000 * MS;
    call(&mut b, now, Outcome::success(FAST));
    assert_eq!(b.state(), Closed);
    let (_, changes) = calls(&mut b, now + MS, MS, 19, Outcome::failure(FAST));
    assert!(changes.is_empty(), "the window restarted empty at closing");
    let (_, changes) = call(&mut b, now + 20 * MS, Outcome::failure(FAST));
    assert_eq!(changes.last().unwrap().to, Open);
}

// ---------------------------------------------------------------------------------------------------------
// Mistake switches: each changes its own behaviour, and nothing else.

#[tokio::test(start_paused = true)]
async fn count_4xx_opens_on_bad_user_input() {
    let mut b = breaker(&seed_000(), &[Mistake::Count4xx]);
    let (_, changes) = calls(&mut b, Instant::now(), MS, 20, Outcome::client_error(FAST));
    assert_eq!(changes.last().unwrap().to, Open);
}

#[tokio::test(start_paused = true)]
async fn bare_count_opens_on_n_failures_hidden_in_high_volume() {
    // Seed 000: at 500 rps, 20 failures in 10 s is 0.4% of 5,000 calls.
    let mut b = breaker(&seed_000(), &[Mistake::BareCount]);
    let t0 = Instant::now();
    let mut now = t0;
    let mut changes = Vec::new();
    for i in 0..5_000u32 {
        let outcome = if i % 250 == 0 {
            Outcome::failure(FAST)
        } else {
            Outcome::success(FAST)
        };
        changes.extend(call(&mut b, now, outcome).1);
        now += 2 * MS;
    }
    assert_eq!(changes.len(), 1, "opens at the 20th failure: {changes:?}");
    assert_eq!(changes[0].at, t0 + 19 * 250 * 2 * MS);
}

#[tokio::test(start_paused = true)]
async fn bare_count_never_opens_when_the_window_holds_fewer_calls_than_the_count() {
    // Seed 000: below 2 calls/s the window holds fewer than 20 calls, even at 100% failure.
    let mut b = breaker(&seed_000(), &[Mistake::BareCount]);
    let (_, changes) = calls(
        &mut b,
        Instant::now(),
        600 * MS,
        200,
        Outcome::failure(FAST),
    );
    assert!(changes.is_empty());
}

#[tokio::test(start_paused = true)]
async fn no_min_calls_opens_on_a_single_failure() {
    let mut b = breaker(&seed_000(), &[Mistake::NoMinCalls]);
    let (_, changes) = call(&mut b, Instant::now(), Outcome::failure(FAST));
    assert_eq!(
        changes.last().unwrap().to,
        Open,
        "one failure out of one is 100% (seed 000's 3am call)"
    );
}

#[tokio::test(start_paused = true)]
async fn unlimited_half_open_lets_every_call_through() {
    let mut b = breaker(&seed_000(), &[Mistake::UnlimitedHalfOpen]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let now = opened + 30_000 * MS;
    let admitted = (0..500).filter(|_| b.try_acquire(now).0.is_ok()).count();
    assert_eq!(admitted, 500);
}

#[tokio::test(start_paused = true)]
async fn slowness_ignored_stays_closed_while_every_call_takes_two_seconds() {
    let mut b = breaker(&seed_000(), &[Mistake::SlownessIgnored]);
    let (now, changes) = calls(
        &mut b,
        Instant::now(),
        MS,
        100,
        Outcome::success(2_000 * MS),
    );
    assert!(changes.is_empty());
    assert_eq!(b.window_counts(now).slow, 0);
}

#[tokio::test(start_paused = true)]
async fn close_on_first_success_closes_on_one_probe_despite_close_after() {
    let mut config = seed_000();
    config.close_after = 3;
    let mut b = breaker(&config, &[Mistake::CloseOnFirstSuccess]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let (_, changes) = call(&mut b, opened + 30_000 * MS, Outcome::success(FAST));
    assert_eq!(changes.last().unwrap().to, Closed);
}

#[tokio::test(start_paused = true)]
async fn close_on_first_success_overrides_hysteresis_too() {
    let mut config = seed_000();
    config.close_after = 10;
    config.recovery_rate = Some(Share::from_fraction(0.2));
    let mut b = breaker(&config, &[Mistake::CloseOnFirstSuccess]);
    let opened = trip(&mut b, Instant::now()) - MS;
    let (_, changes) = call(&mut b, opened + 30_000 * MS, Outcome::success(FAST));
    assert_eq!(changes.last().unwrap().to, Closed);
}

/// A named sequence of calls, each replayed on a fresh breaker; the trace is every admission and change.
struct Script {
    name: &'static str,
    /// The mistakes whose switch must change this script's trace; every other switch must leave it alone.
    exposes: &'static [Mistake],
    run: fn(&mut Breaker, Instant) -> Vec<String>,
}

fn trace(b: &mut Breaker, now: Instant, outcome: Outcome, log: &mut Vec<String>) {
    let (admitted, changes) = call(b, now, outcome);
    log.push(format!("{admitted}"));
    log.extend(changes.iter().map(|c| format!("{:?}->{:?}", c.from, c.to)));
}

/// 20 fast successes 1 ms apart: a window above the floor, so `no_min_calls` has nothing left to change.
fn warm(b: &mut Breaker, t0: Instant, log: &mut Vec<String>) -> Instant {
    (0..20).for_each(|i| trace(b, t0 + i * MS, Outcome::success(FAST), log));
    t0 + 20 * MS
}

/// Warm, then failures 1 ms apart until it opens (20 failures: 50% of 40).
fn warm_then_trip(b: &mut Breaker, t0: Instant, log: &mut Vec<String>) {
    let now = warm(b, t0, log);
    (0..20).for_each(|i| trace(b, now + i * MS, Outcome::failure(FAST), log));
}

fn scripts() -> Vec<Script> {
    vec![
        Script {
            name: "4xx storm",
            exposes: &[Mistake::Count4xx],
            run: |b, t0| {
                let mut log = Vec::new();
                (0..40).for_each(|i| {
                    trace(b, t0 + i * 10 * MS, Outcome::client_error(FAST), &mut log)
                });
                log
            },
        },
        Script {
            name: "high volume, 0.4% failures",
            exposes: &[Mistake::BareCount],
            run: |b, t0| {
                let mut log = Vec::new();
                for i in 0..5_000u32 {
                    let o = if i % 250 == 125 {
                        Outcome::failure(FAST)
                    } else {
                        Outcome::success(FAST)
                    };
                    trace(b, t0 + 2 * i * MS, o, &mut log);
                }
                log
            },
        },
        Script {
            name: "three calls, two failures",
            exposes: &[Mistake::NoMinCalls],
            run: |b, t0| {
                let mut log = Vec::new();
                trace(b, t0, Outcome::success(FAST), &mut log);
                trace(b, t0 + MS, Outcome::failure(FAST), &mut log);
                trace(b, t0 + 2 * MS, Outcome::failure(FAST), &mut log);
                log
            },
        },
        Script {
            name: "half-open burst",
            exposes: &[Mistake::UnlimitedHalfOpen],
            run: |b, t0| {
                let mut log = Vec::new();
                warm_then_trip(b, t0, &mut log);
                let at = t0 + 60_000 * MS;
                for _ in 0..5 {
                    let (admission, change) = b.try_acquire(at);
                    log.push(format!(
                        "{:?} {:?}",
                        admission.map(|p| p.state),
                        change.map(|c| c.to)
                    ));
                }
                log
            },
        },
        Script {
            name: "two-second successes",
            exposes: &[Mistake::SlownessIgnored],
            run: |b, t0| {
                let mut log = Vec::new();
                let now = warm(b, t0, &mut log);
                (0..40)
                    .for_each(|i| trace(b, now + i * MS, Outcome::success(2_000 * MS), &mut log));
                log
            },
        },
        Script {
            name: "one good probe then a failure",
            exposes: &[Mistake::CloseOnFirstSuccess],
            run: |b, t0| {
                let mut log = Vec::new();
                warm_then_trip(b, t0, &mut log);
                let at = t0 + 60_000 * MS;
                trace(b, at, Outcome::success(FAST), &mut log);
                trace(b, at + MS, Outcome::failure(FAST), &mut log);
                log
            },
        },
        Script {
            name: "healthy traffic with rare 5xx",
            exposes: &[],
            run: |b, t0| {
                let mut log = Vec::new();
                for i in 0..4_000u32 {
                    let o = if i % 1_000 == 500 {
                        Outcome::failure(FAST)
                    } else {
                        Outcome::success(FAST)
                    };
                    trace(b, t0 + 5 * i * MS, o, &mut log);
                }
                log
            },
        },
        Script {
            name: "hard outage, failed probe, recovery",
            exposes: &[Mistake::CloseOnFirstSuccess],
            run: |b, t0| {
                let mut log = Vec::new();
                let now = warm(b, t0, &mut log);
                (0..30).for_each(|i| trace(b, now + i * 10 * MS, Outcome::failure(FAST), &mut log));
                let at = t0 + 40_000 * MS;
                trace(b, at, Outcome::failure(FAST), &mut log);
                let at = at + 30_000 * MS;
                (0..30).for_each(|i| trace(b, at + i * MS, Outcome::success(FAST), &mut log));
                log
            },
        },
    ]
}

#[tokio::test(start_paused = true)]
async fn each_breaker_mistake_changes_exactly_the_behaviour_it_names() {
    let config = BreakerConfig {
        close_after: 2,
        half_open_calls: 2,
        slow_call_rate: Share::from_fraction(0.5),
        ..seed_000()
    };
    let breaker_mistakes = [
        Mistake::Count4xx,
        Mistake::BareCount,
        Mistake::NoMinCalls,
        Mistake::UnlimitedHalfOpen,
        Mistake::SlownessIgnored,
        Mistake::CloseOnFirstSuccess,
    ];
    let t0 = Instant::now();
    for m in breaker_mistakes {
        assert!(
            scripts().iter().any(|s| s.exposes.contains(&m)),
            "no script exposes `{}`",
            m.name()
        );
    }
    for script in scripts() {
        let baseline = (script.run)(&mut breaker(&config, &[]), t0);
        for m in breaker_mistakes {
            let with = (script.run)(&mut breaker(&config, &[m]), t0);
            if script.exposes.contains(&m) {
                assert_ne!(
                    with,
                    baseline,
                    "`{}` must change script `{}`",
                    m.name(),
                    script.name
                );
            } else {
                assert_eq!(
                    with,
                    baseline,
                    "`{}` must not change script `{}`",
                    m.name(),
                    script.name
                );
            }
        }
    }
    // The switches that live outside the state machine leave its policy exactly as it is.
    for m in [
        Mistake::NoTimeout,
        Mistake::SharedBreaker,
        Mistake::UnbudgetedRetries,
    ] {
        assert_eq!(
            Policy::new(&config, &[m].into_iter().collect()),
            Policy::new(&config, &BTreeSet::new()),
            "{}",
            m.name()
        );
    }
}
