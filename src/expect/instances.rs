//! Expectations on the instances of a dependency route served by several (`instances: N`), the evidence that an
//! outlier detector did its job: a sick instance's share of the calls falls within seconds of its phase (it was
//! ejected), comes back once it recovers (it returned), and while it is out the healthy instances absorb its share
//! without their calls in flight passing a bound.
//!
//! A share is measured over sliding windows of whole recorded buckets (`over`, 1 s unless written): the instance's
//! arrivals over all the instances' arrivals in the window, in windows of at least [`MIN_WINDOW_CALLS`] calls. Every figure is counted by faultd at the instances'
//! listeners. Not for the route as a whole (`dependency`) nor for what the SUT says of its balancer.

use std::time::Duration;

use faultline_units::{Dur, Share};
use serde::{Deserialize, Serialize};

use super::spec::ExpectationSpec;
use super::words::{during_words, secs};
use super::{ended, phase_words, span, Outcome, Verdict};
use crate::record::{DependencyBucket, RunRecord};

/// The window a share is measured over when the entry does not say (`over`).
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(1);

/// The fewest calls at the instances that make a window's share count: a window with a handful (the last calls
/// before a breaker opened, a half-open probe) says nothing about how the calls are spread.
pub const MIN_WINDOW_CALLS: u64 = 10;

/// A check on the instances of one route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InstanceCheck {
    /// An instance's share of the calls crossing a bound soon after a phase began: ejected or returned.
    Share(ShareCrossing),
    /// Calls in flight at each instance but `except` stay below `below` in every bucket of the span.
    HealthyInFlight {
        route: String,
        except: Option<u32>,
        below: u64,
        during: Option<String>,
    },
}

/// Instance `instance`'s share of the route's calls goes below (ejected) or above (returned) `share` over some
/// window of `window` that ends within `within` of phase `after`'s start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareCrossing {
    pub route: String,
    pub instance: u32,
    pub within: Dur,
    pub after: String,
    pub share: Share,
    pub window: Dur,
    /// Ejected (the share falls below) or returned (it rises above).
    pub ejected: bool,
}

/// An instance check as written, its names not yet resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum InstanceEntry<'a> {
    Share(ShareCrossing),
    HealthyInFlight {
        route: &'a str,
        except: Option<u32>,
        below: u64,
        during: Option<&'a str>,
    },
}

/// Resolves a name a field gives against the scenario (the field, the name), or says why it cannot.
pub type Lookup<'r> = &'r dyn Fn(&str, &str) -> Result<String, String>;

impl<'a> InstanceEntry<'a> {
    /// The instance check an entry holds, if it holds one, or what is wrong with it.
    pub fn read(spec: &'a ExpectationSpec) -> Option<Result<InstanceEntry<'a>, String>> {
        let route = spec.dependency.as_deref()?;
        let crossing = match (spec.ejected_within, spec.returned_within) {
            (Some(within), _) => Some((within, true, spec.share_below, "share_below")),
            (None, Some(within)) => Some((within, false, spec.share_above, "share_above")),
            (None, None) => None,
        };
        if let Some((within, ejected, share, field)) = crossing {
            let check = if ejected {
                "ejected_within"
            } else {
                "returned_within"
            };
            return Some((|| {
                Ok(InstanceEntry::Share(ShareCrossing {
                    route: route.to_string(),
                    instance: spec
                        .instance
                        .filter(|n| *n >= 1)
                        .ok_or("this check needs `instance: N` (numbered from 1)".to_string())?,
                    within,
                    after: spec
                        .after
                        .clone()
                        .ok_or("this check needs `after: <phase>`".to_string())?,
                    share: share.ok_or(format!("`{check}` needs `{field}: <share>`"))?,
                    window: spec.over.unwrap_or(Dur(DEFAULT_WINDOW)),
                    ejected,
                }))
            })());
        }
        let below = spec.healthy_in_flight_below?;
        Some(Ok(InstanceEntry::HealthyInFlight {
            route,
            except: spec.instance,
            below,
            during: spec.during.as_deref(),
        }))
    }

    /// The check, its route and phases resolved with `route` and `phase`.
    pub fn resolve(self, route: Lookup<'_>, phase: Lookup<'_>) -> Result<InstanceCheck, String> {
        Ok(match self {
            InstanceEntry::Share(c) => InstanceCheck::Share(ShareCrossing {
                route: route("dependency", &c.route)?,
                after: phase("after", &c.after)?,
                ..c
            }),
            InstanceEntry::HealthyInFlight {
                route: r,
                except,
                below,
                during,
            } => InstanceCheck::HealthyInFlight {
                route: route("dependency", r)?,
                except,
                below,
                during: during.map(|p| phase("during", p)).transpose()?,
            },
        })
    }
}

impl InstanceCheck {
    /// The route and the instance the check names, if it names one.
    pub(crate) fn instance(&self) -> (&str, Option<u32>) {
        match self {
            InstanceCheck::Share(c) => (&c.route, Some(c.instance)),
            InstanceCheck::HealthyInFlight { route, except, .. } => (route, *except),
        }
    }

    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        match self {
            InstanceCheck::Share(c) => format!(
                "instance {} of {} {} (share {} {}) within {} after {}",
                c.instance,
                c.route,
                if c.ejected { "is ejected" } else { "returns" },
                if c.ejected { "below" } else { "above" },
                c.share,
                c.within,
                c.after
            ),
            InstanceCheck::HealthyInFlight {
                route,
                except,
                below,
                during,
            } => format!(
                "calls in flight at each instance of {route}{} stay below {below}{}",
                except.map(|n| format!(" but {n}")).unwrap_or_default(),
                during_words(during)
            ),
        }
    }

    /// Every instance check can be decided while the run goes on.
    pub(crate) fn decidable_live(&self) -> bool {
        true
    }

    /// The verdict once no later data can change it: a share that crossed its bound, a deadline passed, a bound
    /// passed or the span over.
    pub(crate) fn decide(&self, name: String, record: &RunRecord) -> Option<Verdict> {
        let v = self.evaluate(name, record);
        let settled = match self {
            InstanceCheck::Share(c) => {
                v.passed
                    || record
                        .phase(&c.after)
                        .is_some_and(|p| p.start + c.within.get() <= record.duration)
            }
            InstanceCheck::HealthyInFlight { during, .. } => v.failed() || ended(record, during),
        };
        settled.then_some(v)
    }

    pub(crate) fn evaluate(&self, name: String, record: &RunRecord) -> Verdict {
        match self {
            InstanceCheck::Share(c) => c.judge(name, record),
            InstanceCheck::HealthyInFlight {
                route,
                except,
                below,
                during,
            } => healthy_in_flight(name, record, route, *except, *below, during),
        }
    }
}

impl ShareCrossing {
    fn judge(&self, name: String, record: &RunRecord) -> Verdict {
        let bound = Some(self.share.fraction());
        let (all, mine) = match instance_series(record, &self.route, self.instance) {
            Ok(found) => found,
            Err(why) => return Verdict::new(name, false, why, None, bound),
        };
        let Some(phase) = record.phase(&self.after) else {
            let text = format!("phase {} never began", self.after);
            return Verdict::with_outcome(name, Outcome::Inconclusive, text, None, bound);
        };
        let (window, within) = (self.window.get(), self.within.get());
        let step = record.bucket.as_nanos().max(1);
        let width = (window.as_nanos().div_ceil(step) as usize).max(1);
        let first = phase.start.as_nanos().div_ceil(step) as usize;
        let deadline = phase.start + within;
        // Only windows that have ended by the deadline, and by the end of the record (a run still going on).
        let last_end = ((deadline.as_nanos() / step) as usize)
            .min((record.duration.as_nanos() / step) as usize)
            .min(mine.len());
        let who = format!("instance {} of {}", self.instance, self.route);
        let direction = if self.ejected { "below" } else { "above" };
        let mut best: Option<f64> = None;
        for start in first..=last_end.saturating_sub(width) {
            let total: u64 = all.iter().map(|s| arrivals(s, start, start + width)).sum();
            if total < MIN_WINDOW_CALLS {
                continue;
            }
            let share = arrivals(mine, start, start + width) as f64 / total as f64;
            let crossed = if self.ejected {
                share < self.share.fraction()
            } else {
                share > self.share.fraction()
            };
            if crossed {
                let at = record
                    .bucket_start(start + width)
                    .saturating_sub(phase.start);
                let text = format!(
                    "{who} took {} of the instances' calls in the {} ending {} after {} began; expected {direction} {} within {}",
                    percent(share),
                    secs(window),
                    secs(at),
                    self.after,
                    self.share,
                    secs(within)
                );
                return Verdict::new(name, true, text, Some(share), bound);
            }
            let nearer = best.is_none_or(|b| if self.ejected { share < b } else { share > b });
            if nearer {
                best = Some(share);
            }
        }
        if record.duration < deadline {
            let text = format!(
                "the run ended {} after {} began, before the {} within which {who} must go {direction} {}",
                secs(record.duration.saturating_sub(phase.start)),
                self.after,
                secs(within),
                self.share
            );
            return Verdict::with_outcome(name, Outcome::Inconclusive, text, best, bound);
        }
        let Some(share) = best else {
            let text = format!(
                "fewer than {MIN_WINDOW_CALLS} calls reached {}'s instances in every {} window within {} after {} began",
                self.route,
                secs(window),
                secs(within),
                self.after
            );
            return Verdict::with_outcome(name, Outcome::Inconclusive, text, None, bound);
        };
        let text = format!(
            "{who} took at {} {} of the instances' calls in any {} window within {} after {} began; expected {direction} {}",
            if self.ejected { "least" } else { "most" },
            percent(share),
            secs(window),
            secs(within),
            self.after,
            self.share
        );
        Verdict::new(name, false, text, Some(share), bound)
    }
}

/// Every instance's series of `route` and instance `instance`'s own, or why the record has none.
fn instance_series<'r>(
    record: &'r RunRecord,
    route: &str,
    instance: u32,
) -> Result<(&'r [Vec<DependencyBucket>], &'r [DependencyBucket]), String> {
    let Some(all) = record.instances.get(route) else {
        return Err(format!(
            "no recording of {route}'s instances (give the route `instances: N`)"
        ));
    };
    match all.get((instance as usize).wrapping_sub(1)) {
        Some(mine) => Ok((all, mine)),
        None => Err(format!(
            "{route} has {} instance(s), numbered from 1: there is no instance {instance}",
            all.len()
        )),
    }
}

/// A share as a percentage with one decimal: "33.3%".
fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// Arrivals in buckets `[from, to)` of a series.
fn arrivals(series: &[DependencyBucket], from: usize, to: usize) -> u64 {
    series.iter().take(to).skip(from).map(|b| b.arrivals).sum()
}

fn healthy_in_flight(
    name: String,
    record: &RunRecord,
    route: &str,
    except: Option<u32>,
    below: u64,
    during: &Option<String>,
) -> Verdict {
    let bound = Some(below as f64);
    let Some(all) = record.instances.get(route) else {
        let text = format!("no recording of {route}'s instances (give the route `instances: N`)");
        return Verdict::new(name, false, text, None, bound);
    };
    if let Some(p) = during.as_ref().filter(|p| record.phase(p).is_none()) {
        let text = format!("phase {p} never began");
        return Verdict::with_outcome(name, Outcome::Inconclusive, text, None, bound);
    }
    let s = span(record, during);
    let step = record.bucket.as_nanos().max(1);
    let (from, to) = (
        (s.start.as_nanos() / step) as usize,
        s.end.as_nanos().div_ceil(step) as usize,
    );
    let peak = (1..)
        .zip(all)
        .filter(|(n, _)| Some(*n) != except)
        .filter_map(|(n, series)| {
            let max = series
                .iter()
                .take(to)
                .skip(from)
                .map(|b| b.in_flight_max)
                .max()?;
            Some((max, n))
        })
        .max();
    let Some((max, n)) = peak else {
        let text = format!("{route} has no instance to judge {}", phase_words(&s));
        return Verdict::with_outcome(name, Outcome::Inconclusive, text, None, bound);
    };
    Verdict::new(
        name,
        max < below,
        format!(
            "at most {max} calls in flight at one instance of {route} (instance {n}) {}; expected below {below}",
            phase_words(&s)
        ),
        Some(max as f64),
        bound,
    )
}

#[cfg(test)]
#[path = "instances_tests.rs"]
mod tests;
