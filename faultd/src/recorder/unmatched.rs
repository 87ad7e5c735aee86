//! Calls that matched no route, by method and path: the commonest first-run mistake (a SUT pointed at the wrong
//! path or port of its dependency) shows here instead of vanishing into 404s.
//!
//! For: counting them within fixed memory, and the few paths a person needs to see to fix the SUT's URL. Not for:
//! answering them (the data plane), or the routes' own recordings.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Distinct method and path pairs counted; calls to others count only in the total. A scan of random paths thus
/// costs a bounded map, while a SUT's few wrong paths (the case that matters) are all counted exactly.
const TRACKED: usize = 1_000;
/// The pairs a recording lists, most calls first.
pub const LISTED: usize = 20;
/// A longer path is cut to this many bytes (at a character boundary) before it is counted.
const PATH_BYTES: usize = 200;

/// Calls no route matched, counted as they arrive.
#[derive(Debug, Default)]
pub struct Unmatched {
    total: AtomicU64,
    paths: Mutex<HashMap<(String, String), u64>>,
}

/// One method and path that matched no route, with its calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmatchedPath {
    /// The request's method.
    pub method: String,
    /// The request's path (without the query), cut at 200 bytes.
    pub path: String,
    /// Calls with this method and path.
    pub calls: u64,
}

impl Unmatched {
    /// Counts a call of `method` to `path` that no route matched.
    pub fn record(&self, method: &str, path: &str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let path = cut(path);
        let mut paths = self.paths.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = paths.get_mut(&(method.to_string(), path.to_string())) {
            *n += 1;
        } else if paths.len() < TRACKED {
            paths.insert((method.to_string(), path.to_string()), 1);
        }
    }

    /// Forgets every call counted so far.
    pub fn clear(&self) {
        let mut paths = self.paths.lock().unwrap_or_else(|p| p.into_inner());
        paths.clear();
        self.total.store(0, Ordering::Relaxed);
    }

    /// Calls no route matched, so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The most called unmatched paths, most calls first (ties by method and path).
    pub fn top(&self) -> Vec<UnmatchedPath> {
        let paths = self.paths.lock().unwrap_or_else(|p| p.into_inner());
        top(paths.iter().map(|((method, path), calls)| UnmatchedPath {
            method: method.clone(),
            path: path.clone(),
            calls: *calls,
        }))
    }
}

/// The `LISTED` entries with the most calls, most first; entries of the same method and path are added first (the
/// merge of several recordings).
pub fn top(entries: impl IntoIterator<Item = UnmatchedPath>) -> Vec<UnmatchedPath> {
    let mut by_key: HashMap<(String, String), u64> = HashMap::new();
    for e in entries {
        *by_key.entry((e.method, e.path)).or_default() += e.calls;
    }
    let mut all: Vec<UnmatchedPath> = by_key
        .into_iter()
        .map(|((method, path), calls)| UnmatchedPath {
            method,
            path,
            calls,
        })
        .collect();
    all.sort_by(|a, b| {
        b.calls
            .cmp(&a.calls)
            .then_with(|| a.method.cmp(&b.method))
            .then_with(|| a.path.cmp(&b.path))
    });
    all.truncate(LISTED);
    all
}

fn cut(path: &str) -> &str {
    if path.len() <= PATH_BYTES {
        return path;
    }
    let mut end = PATH_BYTES;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    &path[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_called_paths_are_listed_first_and_at_most_twenty() {
        let u = Unmatched::default();
        for i in 0..30u64 {
            for _ in 0..=i {
                u.record("GET", &format!("/prices/{i}"));
            }
        }
        u.record("POST", "/prices/29");
        let top = u.top();
        assert_eq!(top.len(), LISTED);
        assert_eq!(
            (top[0].method.as_str(), top[0].path.as_str(), top[0].calls),
            ("GET", "/prices/29", 30)
        );
        assert_eq!(top[19].path, "/prices/10");
        assert_eq!(u.total(), (1..=30).sum::<u64>() + 1);
    }

    #[test]
    fn a_scan_of_random_paths_is_counted_in_bounded_memory() {
        let u = Unmatched::default();
        for i in 0..5_000 {
            u.record("GET", &format!("/scan/{i}"));
        }
        u.record("GET", "/scan/1");
        assert_eq!(u.total(), 5_001);
        assert_eq!(u.paths.lock().unwrap().len(), TRACKED);
        assert_eq!(u.top()[0].path, "/scan/1");
        assert_eq!(u.top()[0].calls, 2);
    }

    #[test]
    fn a_long_path_is_cut_at_a_character_boundary() {
        let u = Unmatched::default();
        u.record("GET", &format!("/{}", "é".repeat(300)));
        let path = &u.top()[0].path;
        assert!(
            path.len() <= PATH_BYTES && path.len() >= PATH_BYTES - 1,
            "{}",
            path.len()
        );
    }

    #[test]
    fn merged_lists_add_the_calls_of_the_same_method_and_path() {
        let one = UnmatchedPath {
            method: "GET".into(),
            path: "/a".into(),
            calls: 3,
        };
        let two = UnmatchedPath {
            calls: 4,
            ..one.clone()
        };
        let other = UnmatchedPath {
            path: "/b".into(),
            calls: 5,
            ..one.clone()
        };
        let merged = top([one, other, two]);
        assert_eq!(merged[0].path, "/a");
        assert_eq!(merged[0].calls, 7);
        assert_eq!(merged[1].calls, 5);
    }
}
