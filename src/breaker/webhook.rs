//! Breaker transitions pushed by the SUT: a small HTTP receiver (`POST /breaker-events`, JSON
//! `{"breaker": "pricing", "to": "open", "at_unix_ms": 1764...}`) served on loopback for the length of a run, and
//! the timeline those events make.
//!
//! Not for deciding what the events mean for a verdict; only for when each breaker changed state.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{BreakerState, BreakerTimeline, Source};

/// A transition pushed to the webhook.
#[derive(Debug, Clone, Deserialize)]
pub struct BreakerEvent {
    pub breaker: String,
    pub to: String,
    /// The SUT's own wall-clock time of the change, in Unix milliseconds, if it sends one.
    #[serde(default)]
    pub at_unix_ms: Option<u64>,
}

/// Events as they arrived: when, the SUT's own stamp, and the event.
pub type Events = Arc<Mutex<Vec<(Instant, Option<u64>, BreakerEvent)>>>;

/// The receiver, serving until dropped.
pub struct Webhook {
    url: String,
    events: Events,
    task: JoinHandle<()>,
}

impl Webhook {
    /// Serves the receiver on a free loopback port.
    pub async fn serve() -> std::io::Result<Webhook> {
        let events: Events = Arc::default();
        let listener =
            tokio::net::TcpListener::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let url = format!("http://{}/breaker-events", listener.local_addr()?);
        let app = Router::new()
            .route("/breaker-events", post(receive))
            .with_state(events.clone());
        // A slow head or an idle connection is closed as on faultd's own APIs; the receiver stops with the run.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            faultd::timeouts::serve_api(listener, app, Default::default(), stopped).await;
            drop(stop);
        });
        Ok(Webhook { url, events, task })
    }

    /// Where the SUT posts its events.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The events received so far.
    pub fn events(&self) -> Events {
        self.events.clone()
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(State(events): State<Events>, Json(event): Json<BreakerEvent>) -> &'static str {
    if let Ok(mut e) = events.lock() {
        e.push((Instant::now(), event.at_unix_ms, event));
    }
    "ok"
}

/// The last state pushed for `breaker`.
pub fn last_state(events: &Events, breaker: &str) -> Option<BreakerState> {
    let e = events.lock().ok()?;
    e.iter()
        .rev()
        .find(|(_, _, ev)| ev.breaker == breaker)
        .and_then(|(_, _, ev)| BreakerState::parse(&ev.to))
}

/// A stamp more than a day from the run's origin is not on the same clock; its arrival time is used instead.
const DAY_NS: i128 = 86_400 * 1_000_000_000;

/// The timeline of the events named `breaker`, on the run's clock (`origin` is t = 0, `origin_wall` its wall-clock
/// time). The SUT's own timestamp, where it sends one, is when the breaker changed; arrival here is a few
/// milliseconds later, long enough to count returning traffic as probes.
pub fn timeline(
    events: &Events,
    breaker: &str,
    origin: Instant,
    origin_wall: SystemTime,
) -> BreakerTimeline {
    // The origin to the nanosecond, not rounded to a millisecond: a stamp counts down to its millisecond, so
    // against an exact origin the transition is placed at most 1 ms early and never late (a close placed late
    // would count the first calls after it as probes).
    let origin_unix_ns = origin_wall
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    let events = events.lock().map(|e| e.clone()).unwrap_or_default();
    let mut obs: Vec<(Duration, BreakerState)> = events
        .iter()
        .filter(|(_, _, e)| e.breaker == breaker)
        .filter_map(|(at, stamped, e)| {
            let arrived = at.saturating_duration_since(origin);
            let t = match stamped {
                Some(ms) if (*ms as i128 * 1_000_000 - origin_unix_ns).abs() < DAY_NS => {
                    let ns = (*ms as i128 * 1_000_000 - origin_unix_ns).max(0);
                    Duration::from_nanos(ns as u64).min(arrived)
                }
                _ => arrived,
            };
            BreakerState::parse(&e.to).map(|s| (t, s))
        })
        .collect();
    obs.sort_by_key(|(t, _)| *t);
    BreakerTimeline::from_observations(&obs, Source::Webhook, Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(to: &str, at_unix_ms: u64) -> BreakerEvent {
        BreakerEvent {
            breaker: "pricing".into(),
            to: to.into(),
            at_unix_ms: Some(at_unix_ms),
        }
    }

    #[test]
    fn a_millisecond_stamp_is_never_placed_after_the_transition() {
        // The run began 0.9 ms into a wall-clock millisecond; the breaker closed 9.1 ms later, at wall-clock
        // 10.0 ms exactly. Rounding the origin down as well would place the close at 10 ms, 0.9 ms late.
        let origin = Instant::now();
        let origin_wall = SystemTime::UNIX_EPOCH + Duration::from_micros(1_764_000_000_000_900);
        let arrived = origin + Duration::from_millis(12);
        let events: Events = Arc::new(Mutex::new(vec![
            (
                arrived,
                Some(1_764_000_000_005),
                event("half_open", 1_764_000_000_005),
            ),
            (
                arrived,
                Some(1_764_000_000_010),
                event("closed", 1_764_000_000_010),
            ),
        ]));
        let t = timeline(&events, "pricing", origin, origin_wall);
        let at: Vec<Duration> = t.transitions.iter().map(|tr| tr.at).collect();
        assert_eq!(
            at,
            vec![Duration::from_micros(4_100), Duration::from_micros(9_100)]
        );
    }

    #[test]
    fn a_stamp_later_than_its_arrival_or_on_another_clock_falls_back_to_the_arrival() {
        let origin = Instant::now();
        let origin_wall = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_000_000_000);
        let events: Events = Arc::new(Mutex::new(vec![
            // 50 ms ahead of its own arrival: a clock that runs fast.
            (
                origin + Duration::from_millis(20),
                Some(1_764_000_000_070),
                event("open", 1_764_000_000_070),
            ),
            // 1970: not this run's clock at all.
            (
                origin + Duration::from_millis(30),
                Some(5),
                event("half_open", 5),
            ),
        ]));
        let t = timeline(&events, "pricing", origin, origin_wall);
        let at: Vec<Duration> = t.transitions.iter().map(|tr| tr.at).collect();
        assert_eq!(
            at,
            vec![Duration::from_millis(20), Duration::from_millis(30)]
        );
    }
}
