//! Breaker states scraped from the SUT's Prometheus endpoint on an interval: one task per URL serves every breaker
//! read from it, each sample stamped with its time on the run's clock.
//!
//! Not for reading a state off a page (`scrape`) nor for turning samples into transitions
//! (`BreakerTimeline::from_observations`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::prometheus;
use super::scrape::StateMapping;
use super::BreakerState;

/// Scraped states per breaker, with their time from the origin.
pub type Scraped = Arc<Mutex<BTreeMap<String, Vec<(Duration, BreakerState)>>>>;

/// Scrapes `url` every `interval` from `origin` until aborted, recording the state of each breaker in `breakers`.
/// A failed scrape records nothing: the gap shows as a coarser transition, never a wrong one.
pub async fn scrape_loop(
    url: String,
    interval: Duration,
    breakers: Vec<(String, StateMapping)>,
    origin: Instant,
    out: Scraped,
) {
    let Ok(client) = crate::http::client_builder()
        .timeout(interval.max(Duration::from_millis(50)))
        .build()
    else {
        return;
    };
    let mut ticker = tokio::time::interval_at(origin, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticker.tick().await;
        let at = Instant::now().saturating_duration_since(origin);
        let Ok(resp) = client.get(&url).send().await else {
            continue;
        };
        let Ok(page) = resp.text().await else {
            continue;
        };
        let (samples, _) = prometheus::parse(&page);
        if let Ok(mut out) = out.lock() {
            for (name, mapping) in &breakers {
                if let Some(state) = mapping.state(&samples) {
                    out.entry(name.clone()).or_default().push((at, state));
                }
            }
        }
    }
}
