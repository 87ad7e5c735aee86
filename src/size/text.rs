//! A sizing as the text `faultline size` prints: each setting, the arithmetic with the user's numbers in it, and
//! the reason, quoting the seeds; then the warnings. Not for the figures (`arithmetic`).

use std::fmt::Write;

use faultline_units::Dur;

use super::arithmetic::{Origin, Sizing, TOLERABLE_CUT};
use crate::expect::words::trim2;

/// A count as people read it: `1,200`, `80`, `1.5`, `0.15`.
pub fn count(x: f64) -> String {
    if x >= 100.0 || (x.fract() == 0.0 && x >= 1.0) {
        let n = x.round() as u64;
        let digits = n.to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else if x >= 10.0 {
        format!("{x:.0}")
    } else {
        trim2(x)
    }
}

/// Seconds as the seeds say how long something takes: `0.5 s`, `5.25 s`, `200 s`.
fn after(s: f64) -> String {
    format!("{} s", count(s))
}

/// `n` calls, `1` call.
fn calls(n: f64) -> String {
    format!(
        "{} call{}",
        count(n),
        if count(n) == "1" { "" } else { "s" }
    )
}

/// Each line of `text` wrapped at 116 columns, its continuation indented `more` past the line's own indent.
pub fn wrap(text: &str, more: usize) -> String {
    const WIDTH: usize = 116;
    let mut out = String::new();
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let mut current = String::new();
        for word in line.split_whitespace() {
            if !current.is_empty() && current.len() + 1 + word.len() > WIDTH {
                out.push_str(&current);
                out.push('\n');
                current = " ".repeat(indent + more);
            } else if !current.is_empty() && !current.ends_with(' ') {
                current.push(' ');
            } else if current.is_empty() {
                current = " ".repeat(indent);
            }
            current.push_str(word);
        }
        out.push_str(&current);
        out.push('\n');
    }
    out
}

/// Seconds as a duration, to the millisecond (to the microsecond under one): `200ms`, `3s`, `5.25s`.
pub fn secs(s: f64) -> String {
    let d = if s < 1e-3 {
        Dur::from_secs_f64((s * 1e6).round() / 1e6)
    } else {
        Dur::from_millis((s * 1e3).round() as u64)
    };
    d.to_string()
}

fn rate(r: f64) -> String {
    format!("{}/s", count(r))
}

/// A share as a percent: `50%`, `7.2%`, `0.4%`.
pub fn percent(f: f64) -> String {
    let p = f * 100.0;
    if p >= 1.0 || p == 0.0 {
        format!("{}%", count((p * 10.0).round() / 10.0))
    } else {
        format!("{}%", trim2(p))
    }
}

fn from(o: Origin) -> &'static str {
    match o {
        Origin::Given => "given",
        Origin::Record => "recorded",
    }
}

/// The warnings a sizing carries: a floor never met, a pool too small even with the timeout, a timeout that cuts
/// off healthy calls, a degradation the timeout never sees.
pub fn warnings(s: &Sizing) -> Vec<String> {
    let mut out = Vec::new();
    let b = &s.breaker;
    if let (Some(false), Some(calls), Some(per)) =
        (b.floor_met, b.calls_per_window, s.numbers.rate_per_instance)
    {
        let total = s.numbers.rate_per_s.map_or(per, |r| r.value);
        out.push(format!(
            "the breaker never opens, even at 100% failures: {} per instance is {} per {} window against a \
             floor of {}. Seed 000's three options: widen the window ({} calls at {} take {}, by which point the \
             signal is stale); lower the floor (and accept tripping on noise); or move the counter where all {} is \
             one stream (a gateway hop every caller shares, or counters in Redis; a per-pod sidecar sees the same \
             {}). At this volume the honest answer is often a tight timeout and a single retry, and no breaker at all.",
            rate(per),
            self::calls(calls),
            secs(b.window_s),
            b.min_calls,
            b.min_calls,
            rate(per),
            after(b.window_needed_s.unwrap_or(f64::INFINITY)),
            rate(total),
            rate(per),
        ));
    }
    if let Some(f) = &s.in_flight {
        if let Some(w) = f.with_timeout.filter(|w| *w >= f64::from(f.pool)) {
            out.push(format!(
                "even with the timeout, {} calls in flight fill the pool of {}: a bigger pool, a shorter timeout or \
                 less traffic per instance",
                count(w),
                f.pool
            ));
        }
    }
    if let Some(t) = &s.timeout {
        if let (Some(share), Some(_)) = (t.cut_share, t.cut_calls) {
            if share > TOLERABLE_CUT {
                out.push(format!(
                    "the {} timeout cuts off {} of healthy calls: the tail is longer than 3x the p99 suggests, and \
                     these failures count toward tripping the breaker on a healthy dependency",
                    secs(t.seconds),
                    percent(share)
                ));
            }
        }
        if let Some(d) = s.numbers.degraded_s.filter(|d| d.value <= t.seconds) {
            out.push(format!(
                "the degraded latency ({}) is under the {} timeout: those calls succeed slowly, the breaker counts \
                 no failure, and only the pool bounds them (a slow-call threshold counts them)",
                secs(d.value),
                secs(t.seconds)
            ));
        }
    }
    if b.played_record && b.opens_on_record_s.is_none() && b.floor_met == Some(true) {
        out.push(
            "on the recorded degradation the breaker never opens: its calls do not fail often enough, even \
             counting those over the timeout"
                .into(),
        );
    }
    out
}

/// The text `faultline size` prints.
pub fn text(s: &Sizing) -> String {
    let mut y = String::new();
    let n = &s.numbers;
    if let Some(r) = &n.record {
        let _ = writeln!(
            y,
            "From {r}, dependency {}.",
            n.dependency.as_deref().unwrap_or("?")
        );
    }
    let mut used = Vec::new();
    if let Some(p) = n.p99_s {
        used.push(format!("healthy p99 {} ({})", secs(p.value), from(p.from)));
    }
    if let Some(r) = n.rate_per_s {
        used.push(format!("{} ({})", rate(r.value), from(r.from)));
    }
    if n.instances > 1 {
        used.push(format!("{} instances", n.instances));
    }
    if let Some(p) = n.pool {
        used.push(format!("a pool of {p} per instance"));
    }
    if let Some(d) = n.degraded_s {
        used.push(format!("degraded to {} ({})", secs(d.value), from(d.from)));
    }
    let _ = writeln!(y, "Numbers: {}.\n", used.join(", "));
    timeout_text(&mut y, s);
    in_flight_text(&mut y, s);
    breaker_text(&mut y, s);
    open_text(&mut y, s);
    for w in &s.warnings {
        let _ = writeln!(y, "WARNING: {w}");
    }
    wrap(&y, 2)
}

fn timeout_text(y: &mut String, s: &Sizing) {
    let Some(t) = &s.timeout else {
        let _ = writeln!(y, "Timeout: give --p99 (or a record) to size it.\n");
        return;
    };
    let p99 = s.numbers.p99_s.map_or(0.0, |p| p.value);
    let _ = writeln!(y, "Timeout: {}", secs(t.seconds));
    let _ = writeln!(
        y,
        "  3 x the healthy p99 of {} is {}, rounded up to {}. Seed 000: derive it from the healthy p99, roughly 3x; \
         too tight and tail requests trip the breaker on a healthy dependency, too loose and it stops bounding \
         concurrency.",
        secs(p99),
        secs(t.three_p99_s),
        secs(t.seconds)
    );
    match (t.cut_calls, t.healthy_calls, t.cut_share) {
        (Some(cut), Some(all), Some(share)) => {
            let _ = writeln!(
                y,
                "  On the recorded healthy distribution it cuts off {} of {} calls ({}).",
                count(cut),
                count(all as f64),
                percent(share)
            );
        }
        _ => {
            let _ = writeln!(
                y,
                "  It cuts off under 1% of healthy calls, since the p99 is under it; a record gives the exact share."
            );
        }
    }
    let _ = writeln!(y);
}

fn in_flight_text(y: &mut String, s: &Sizing) {
    let (Some(f), Some(l)) = (&s.in_flight, s.numbers.rate_per_instance) else {
        let _ = writeln!(
            y,
            "Calls in flight: give --rate (or a record) to size them.\n"
        );
        return;
    };
    let per = if s.numbers.instances > 1 {
        " per instance"
    } else {
        ""
    };
    let _ = writeln!(y, "Calls in flight{per} (Little's law: rate x latency)");
    if let Some(h) = f.healthy {
        let _ = writeln!(
            y,
            "  healthy: {} x {} = {}{}.",
            rate(l),
            match (f.healthy_is_bound, s.numbers.p99_s) {
                (true, Some(p)) => format!("{} (the p99)", secs(p.value)),
                _ => format!("{} (the recorded mean)", secs(h / l.max(1e-9))),
            },
            if f.healthy_is_bound { "at most " } else { "" },
            count(h)
        );
    }
    let pool = if f.pool_given {
        format!("the pool of {}", f.pool)
    } else {
        format!(
            "a pool of {} (recommended: half again the calls the timeout lets through, at least 10)",
            f.pool
        )
    };
    if let (Some(w), Some(d)) = (f.without_timeout, s.numbers.degraded_s) {
        let _ = write!(
            y,
            "  degraded to {}, without a timeout: {} x {} = {} against {pool}",
            secs(d.value),
            rate(l),
            secs(d.value),
            count(w)
        );
        match f.pool_full_after_s {
            Some(full) => {
                let _ = writeln!(
                    y,
                    ", {}x over: the pool is full {} into the degradation ({} / {}), and everything behind it queues.",
                    count(w / f64::from(f.pool)),
                    after(full),
                    f.pool,
                    rate(l)
                );
            }
            None => {
                let _ = writeln!(y, ": it holds.");
            }
        }
    }
    if let (Some(w), Some(t)) = (f.with_timeout, &s.timeout) {
        let held = if w < f64::from(f.pool) {
            format!(
                "under the pool of {}: the pool survives even before the breaker trips",
                f.pool
            )
        } else {
            format!("not under the pool of {}", f.pool)
        };
        let _ = writeln!(
            y,
            "  with the {} timeout: {} x {} = {} at most, {held}.",
            secs(t.seconds),
            rate(l),
            secs(
                s.numbers
                    .degraded_s
                    .map_or(t.seconds, |d| d.value.min(t.seconds))
            ),
            count(w)
        );
    }
    let _ = writeln!(y);
}

fn breaker_text(y: &mut String, s: &Sizing) {
    let b = &s.breaker;
    let _ = writeln!(
        y,
        "Breaker: trip at {} failures over a rolling {} window, once it holds at least {} calls",
        percent(b.failure_rate),
        secs(b.window_s),
        b.min_calls
    );
    let _ = writeln!(
        y,
        "  A rate over a volume floor (seed 000): the rate scales with traffic, the floor discards windows too small \
         to mean anything."
    );
    if let (Some(calls), Some(l)) = (b.calls_per_window, s.numbers.rate_per_instance) {
        let met = if b.floor_met == Some(true) {
            "the floor is met"
        } else {
            "the floor is never met"
        };
        let _ = writeln!(
            y,
            "  each instance sees {} x {} = {} per window: {met}.",
            rate(l),
            secs(b.window_s),
            self::calls(calls)
        );
    }
    if let Some(at) = b.opens_after_s {
        let _ = writeln!(
            y,
            "  when every call fails, it opens about {} in (the timeout, then {} of the window).",
            after(at),
            percent(b.failure_rate)
        );
    }
    if b.played_record {
        match b.opens_on_record_s {
            Some(at) => {
                let _ = writeln!(
                    y,
                    "  on the recorded degradation, played bucket by bucket, it opens {} after the degradation began.",
                    after(at)
                );
            }
            None => {
                let _ = writeln!(y, "  on the recorded degradation it never opens.");
            }
        }
    }
    let _ = writeln!(y);
}

fn open_text(y: &mut String, s: &Sizing) {
    let o = &s.open_window;
    let why = if o.open_for_given {
        "given"
    } else if o.fallback.serves() {
        "seed 000's default: long enough for a restart or a pause to end, short enough to notice recovery"
    } else {
        "no fallback, so short: seed 000 says shorten the open window toward 5s and accept more probe waves"
    };
    let _ = writeln!(y, "Open window: {} ({why})", secs(o.seconds));
    if let (Some(failed), Some(r)) = (o.failed_fast_per_trip, s.numbers.rate_per_s) {
        let served = match o.fallback {
            super::Fallback::Stale => {
                "each served the last good value, labelled stale: a non-event"
            }
            super::Fallback::Default => "each served a degraded default",
            super::Fallback::None => {
                "each a hard 503 with Retry-After: an incident, unless the open window is short"
            }
        };
        let _ = writeln!(
            y,
            "  {} x {} = {} requests fail fast per trip, {served}.",
            rate(r.value),
            secs(o.seconds),
            count(failed)
        );
    }
    let _ = writeln!(
        y,
        "  {} probe waves a minute from each instance while the dependency stays sick.",
        count(o.probe_waves_per_minute)
    );
    let h = &s.half_open;
    let _ = writeln!(
        y,
        "Half-open: {} probe{} at a time; {} closes the breaker and resets its counters, one failure re-opens it for \
         another {} ({} probes a minute reach the dependency from {} instance{}). Seed 004 asks several successes \
         (--close-after) of a dependency that flaps.\n",
        h.probes,
        if h.probes == 1 { "" } else { "s" },
        if h.close_after == 1 {
            "one success".to_string()
        } else {
            format!("{} successes", h.close_after)
        },
        secs(o.seconds),
        count(h.probes_per_minute),
        s.numbers.instances,
        if s.numbers.instances == 1 { "" } else { "s" },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_durations_read_as_the_seeds_write_them() {
        assert_eq!(count(1200.0), "1,200");
        assert_eq!(count(15000.0), "15,000");
        assert_eq!(count(80.0), "80");
        assert_eq!(count(0.5), "0.5");
        assert_eq!(count(1.0), "1");
        assert_eq!(count(6.0), "6");
        assert_eq!(secs(0.2), "200ms");
        assert_eq!(secs(0.5), "500ms");
        assert_eq!(secs(5.25), "5.25s");
        assert_eq!(secs(3.0), "3s");
    }
}
