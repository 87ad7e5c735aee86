//! What one faultd configuration may hold: how many routes and phases, how many entries a list, and how large it
//! may be in all, the same whichever way it arrives (a file, a scenario the runner embeds, the control API, the
//! Toxiproxy API).
//!
//! For: the limits, as constants in this one place, and the checks that hold a configuration, a behaviour set at
//! run time and the registry of TCP routes to them. Why: faultd compiles every route and every phase it is given
//! before the first call, so a configuration far beyond real use (tens of thousands of routes fit in a 2 MiB
//! body) would cost gigabytes and seconds of a shared machine. Each limit sits at least ten times above what the
//! largest configuration of the scenario library holds. Not for: what the values mean (the schedule's rules and each
//! behaviour check that).

use serde::Serialize;
use serde_json::Value;

use crate::behaviours::{Matched, Response, MAX_HISTOGRAM_BINS};
use crate::config::Config;
use crate::invalid::Invalid;

/// The most routes (HTTP and TCP together) one configuration holds, and the most TCP routes (proxies) the
/// Toxiproxy API keeps.
pub const MAX_ROUTES: usize = 1_000;
/// The most phases one schedule holds. An imported incident has one phase per bucket of its record (an hour at the
/// default 1 s is 3,600), so this stays above what the YAML reader's budget lets an import write.
pub const MAX_PHASES: usize = 10_000;
/// The most phases times routes: the compiled schedule holds every route's behaviour in every phase, so many
/// phases go with few routes (an import: 10,000 phases of one route) and many routes with fewer phases.
pub const MAX_SCHEDULE_CELLS: usize = 1_000_000;
/// The most entries of any other list or map: errors, headers, toxics (also per proxy through the Toxiproxy API),
/// gRPC errors, metadata and trailers. A recorded latency histogram holds up
/// to [`MAX_HISTOGRAM_BINS`] bins instead.
pub const MAX_ENTRIES: usize = 100;
/// The most values (maps, lists, keys and scalars) a configuration holds in all: the budget the YAML reader gives
/// a configuration file, applied to every other way in too.
pub const MAX_VALUES: usize = 250_000;
/// The most bytes a configuration holds, written as compact JSON: the control API's body limit, so whatever a file
/// holds can also be sent to a running faultd.
pub const MAX_BYTES: usize = 2 << 20;
/// The most bytes of healthy bodies a configuration has faultd build: each route's base and each behaviour a phase
/// sets on a route is compiled with a body of its own (`response.body_size`, up to 64 MiB each), so a large body
/// on a route that many phases touch would otherwise be built once per phase.
pub const MAX_HEALTHY_BODY_BYTES: u64 = 256 << 20;

/// The longest name of a route, a proxy or a toxic, in bytes: names travel in URL paths (`/routes/{name}`,
/// `/proxies/{name}/toxics/{toxic}`), in every recording and in every report.
pub const MAX_NAME_BYTES: usize = 200;

/// Refuses a name (of a route, a proxy, a toxic) that the APIs could not address or that is absurdly long: empty,
/// over [`MAX_NAME_BYTES`], or holding `/`, `?`, `#`, `%`, whitespace or a control character.
pub fn check_name(field: &str, name: &str) -> Result<(), Invalid> {
    if name.is_empty() {
        return Err(Invalid::new(field, "a name cannot be empty"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(Invalid::new(
            field,
            format!(
                "a name of {} bytes, over faultd's limit of {MAX_NAME_BYTES}",
                name.len()
            ),
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '/' | '?' | '#' | '%') || c.is_whitespace() || c.is_control())
    {
        return Err(Invalid::new(
            field,
            format!(
                "{:?} holds {c:?}: a name is addressed in URL paths, so it takes no '/', '?', '#', '%', \
                 space or control character",
                shorten(name)
            ),
        ));
    }
    Ok(())
}

/// The start of a long name, for an error message.
fn shorten(name: &str) -> String {
    match name.char_indices().nth(40) {
        Some((at, _)) => format!("{}...", &name[..at]),
        None => name.to_string(),
    }
}

/// Holds a whole configuration to every limit; fields are named from the configuration's root.
pub fn check_config(config: &Config) -> Result<(), Invalid> {
    // The counts first: they are free, and what an oversized configuration usually overflows.
    at_most("routes", config.routes.len(), MAX_ROUTES, "routes")?;
    at_most("phases", config.phases.len(), MAX_PHASES, "phases")?;
    let cells = config.phases.len() * config.routes.len();
    if cells > MAX_SCHEDULE_CELLS {
        return Err(Invalid::new(
            "phases",
            format!(
                "{} phases x {} routes = {cells} behaviours in the schedule, over faultd's limit of {MAX_SCHEDULE_CELLS}",
                config.phases.len(),
                config.routes.len()
            ),
        ));
    }
    check_size(config)?;
    check_healthy_bodies(config)
}

/// Adds up the healthy bodies the compiled schedule builds, naming the route or phase that goes over the limit.
fn check_healthy_bodies(config: &Config) -> Result<(), Invalid> {
    let size = |r: Option<&Response>| r.and_then(|r| r.body_size).map_or(0, |s| s.bytes());
    let mut total = 0;
    let mut add = |bytes: u64, field: String| {
        total += bytes;
        if total > MAX_HEALTHY_BODY_BYTES {
            return Err(Invalid::new(
                field,
                format!(
                    "healthy bodies of {} MiB in all, over faultd's limit of {} MiB for one configuration",
                    total >> 20,
                    MAX_HEALTHY_BODY_BYTES >> 20
                ),
            ));
        }
        Ok(())
    };
    // A matched entry that sets its own `response` builds its own body, once more in each phase that compiles it.
    let entries = |list: Option<&Vec<Matched>>| -> u64 {
        list.into_iter()
            .flatten()
            .map(|e| size(e.response.as_ref()))
            .sum()
    };
    for (name, route) in &config.routes {
        add(
            size(route.response.as_ref()),
            format!("routes.{name}.response.body_size"),
        )?;
        add(
            entries(route.matched.as_ref()),
            format!("routes.{name}.matched"),
        )?;
    }
    for (i, phase) in config.phases.iter().enumerate() {
        for (name, set) in &phase.routes {
            let Some(route) = config.routes.get(name) else {
                continue;
            };
            // Each route a phase names is compiled again, its behaviour laid over the base field by field.
            let (response, matched) = match set.set() {
                Some(b) => (
                    b.response.as_ref().or(route.response.as_ref()),
                    b.matched.as_ref().or(route.matched.as_ref()),
                ),
                None => (route.response.as_ref(), route.matched.as_ref()),
            };
            add(
                size(response) + entries(matched),
                format!("phases[{i}].routes.{name}"),
            )?;
        }
    }
    Ok(())
}

/// Holds one value (a behaviour set at run time, a configuration) to the limits on entries, values and bytes;
/// fields are named from the value's root.
pub fn check_size<T: Serialize>(value: &T) -> Result<(), Invalid> {
    let mut bytes = ByteCount(0);
    serde_json::to_writer(&mut bytes, value).map_err(|e| Invalid::new("", e.to_string()))?;
    if bytes.0 > MAX_BYTES {
        return Err(Invalid::new(
            "",
            format!(
                "{} bytes as JSON, over faultd's limit of {MAX_BYTES} bytes ({} MiB) for one configuration",
                bytes.0,
                MAX_BYTES >> 20
            ),
        ));
    }
    let tree = serde_json::to_value(value).map_err(|e| Invalid::new("", e.to_string()))?;
    let mut values = 0;
    walk(&tree, "", &mut values)
}

/// Refuses `count` of `what` in `field` when it is over `limit`.
pub fn at_most(field: &str, count: usize, limit: usize, what: &str) -> Result<(), Invalid> {
    if count > limit {
        return Err(Invalid::new(
            field,
            format!("{count} {what}, over faultd's limit of {limit}"),
        ));
    }
    Ok(())
}

/// Counts every value under `value` into `values` and holds each list or map to its limit.
fn walk(value: &Value, field: &str, values: &mut usize) -> Result<(), Invalid> {
    *values += 1;
    let entries = match value {
        Value::Array(items) => items.len(),
        Value::Object(map) => map.len(),
        _ => 0,
    };
    // A map's keys are values of the document too, as the YAML reader counts them.
    let keys = if value.is_object() { entries } else { 0 };
    *values += keys;
    if *values > MAX_VALUES {
        return Err(Invalid::new(
            "",
            format!(
                "more than {MAX_VALUES} values (maps, lists, keys and scalars), faultd's limit for one configuration"
            ),
        ));
    }
    if entries > 0 {
        let (limit, what) = entry_limit(field);
        at_most(field, entries, limit, what)?;
    }
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| walk(v, &format!("{field}[{i}]"), values)),
        Value::Object(map) => map.iter().try_for_each(|(k, v)| {
            let child = if field.is_empty() {
                k.clone()
            } else {
                format!("{field}.{k}")
            };
            walk(v, &child, values)
        }),
        _ => Ok(()),
    }
}

/// The limit of the list or map at `field`: the routes and phases (and what is keyed by their names) have their
/// own, a recorded histogram its bins, every other list [`MAX_ENTRIES`].
fn entry_limit(field: &str) -> (usize, &'static str) {
    let last = field.rsplit('.').next().unwrap_or(field);
    let parent = field.rsplit_once('.').map_or("", |(p, _)| p);
    let a_phase = parent.starts_with("phases[") && !parent.contains('.');
    match (field, last) {
        ("routes", _) => (MAX_ROUTES, "routes"),
        ("phases" | "tls.phases", _) => (MAX_PHASES, "phases"),
        (_, "routes") if a_phase => (MAX_ROUTES, "routes"),
        (_, "histogram") if parent.ends_with("latency") => (MAX_HISTOGRAM_BINS, "bins"),
        _ => (MAX_ENTRIES, "entries"),
    }
}

/// A writer that only counts what it is given.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_list_is_held_to_the_limit_of_what_it_holds() {
        assert_eq!(entry_limit("routes"), (MAX_ROUTES, "routes"));
        assert_eq!(entry_limit("phases"), (MAX_PHASES, "phases"));
        assert_eq!(entry_limit("tls.phases"), (MAX_PHASES, "phases"));
        assert_eq!(entry_limit("phases[3].routes"), (MAX_ROUTES, "routes"));
        assert_eq!(
            entry_limit("phases[3].routes.pricing.latency.histogram"),
            (MAX_HISTOGRAM_BINS, "bins")
        );
        assert_eq!(
            entry_limit("routes.pricing.latency.histogram"),
            (MAX_HISTOGRAM_BINS, "bins")
        );
        assert_eq!(
            entry_limit("routes.pricing.errors"),
            (MAX_ENTRIES, "entries")
        );
        // A route named `routes` is a route, not a phase's map of routes.
        assert_eq!(
            entry_limit("routes.routes.response.headers"),
            (MAX_ENTRIES, "entries")
        );
        assert_eq!(
            entry_limit("phases[0].routes.routes.errors"),
            (MAX_ENTRIES, "entries")
        );
    }
}
