//! `load.replay`: an exact timetable instead of a rate. Each line of the file is one recorded request,
//! `TIME METHOD PATH` (`1791640500.005 GET /product/42`), in time order; it is sent at its own offset from the
//! replay's start, with its own method and path, as an open-model arrival (its latency counts from that intended
//! time like any other). `faultline import --replay-load` writes such a file from a record.
//!
//! TIME is seconds with a fraction, Unix seconds as records give them or offsets from 0; `from` is the time that
//! falls at the run's t = 0 (default: the first line's). `speed` divides every offset (2 plays the record twice
//! as fast; the run's `--time-scale` changes it). `scale_rate` offers more or fewer requests than recorded,
//! deterministically from the run's seed: each line is sent `floor(F)` times, plus once more with probability
//! `F - floor(F)` (so 0.5 keeps every line with even odds, 2.5 sends each two or three times); the copies of one
//! line are spread evenly over the gap to the next line, so the recorded arrivals per second are multiplied by F
//! without bursts of identical requests. Blank lines and lines beginning with `#` are skipped.
//!
//! The file is read line by line while the run goes, never held whole, so a timetable of millions of requests
//! costs the memory of one line. Not for choosing requests from templates (that is the request pipeline's compile
//! step), nor for rates (that is `schedule`), nor for the bytes a line becomes (`request::http1::compile`).

use std::collections::VecDeque;
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::LoadError;

/// Seeds the thinning and repeating of `scale_rate` apart from the mix and from Poisson arrivals.
const SCALE_SEED_SALT: u64 = 0x7265_706c_6179_5f73;

/// The methods a timetable may name.
const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// The timetable a load replays: `replay: FILE`, or `replay: { file: FILE, from: T, speed: F, scale_rate: F }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replay {
    /// The timetable's path (a scenario's is relative to the scenario file).
    pub file: String,
    /// The time in the file that falls at the run's t = 0 (default: the first line's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<f64>,
    /// Offsets are divided by this: 2 plays the timetable twice as fast.
    pub speed: f64,
    /// Requests sent per recorded one, on average (1 = as recorded).
    pub scale_rate: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayFields {
    file: String,
    #[serde(default)]
    from: Option<f64>,
    #[serde(default = "one")]
    speed: f64,
    #[serde(default = "one")]
    scale_rate: f64,
}

fn one() -> f64 {
    1.0
}

impl<'de> Deserialize<'de> for Replay {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Replay;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a timetable file, or {{ file: FILE, from: SECONDS, speed: F, scale_rate: F }}"
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Replay, E> {
                Ok(Replay::file(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Replay, A::Error> {
                let f = ReplayFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Replay {
                    file: f.file,
                    from: f.from,
                    speed: f.speed,
                    scale_rate: f.scale_rate,
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl schemars::JsonSchema for Replay {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Replay".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "an exact timetable to replay: a file of `TIME METHOD PATH` lines, or { file, from, speed, scale_rate }",
            "oneOf": [
                { "type": "string" },
                {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["file"],
                    "properties": {
                        "file": { "type": "string", "description": "the timetable, relative to the scenario file" },
                        "from": { "type": "number", "description": "the time in the file at the run's t = 0 (default: the first line's)" },
                        "speed": { "type": "number", "exclusiveMinimum": 0, "description": "offsets are divided by this" },
                        "scale_rate": { "type": "number", "exclusiveMinimum": 0, "description": "requests sent per recorded one" }
                    }
                }
            ]
        })
    }
}

/// One line of a timetable.
#[derive(Debug, Clone, PartialEq)]
pub struct Line<'a> {
    /// Seconds.
    pub time: f64,
    /// One of the methods loadgen sends.
    pub method: &'a str,
    /// A URL path, with its query if any.
    pub path: &'a str,
}

/// Reads one line: `Ok(None)` for a blank line or a comment.
pub fn parse_line(text: &str) -> Result<Option<Line<'_>>, String> {
    let text = text.trim();
    if text.is_empty() || text.starts_with('#') {
        return Ok(None);
    }
    let mut parts = text.split_ascii_whitespace();
    let (Some(time), Some(method), Some(path), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!(
            "expected `TIME METHOD PATH` (e.g. `12.250 GET /product/42`), found {text:?}"
        ));
    };
    let time: f64 = time
        .parse()
        .ok()
        .filter(|t: &f64| t.is_finite() && *t >= 0.0)
        .ok_or_else(|| format!("the time {time:?} is not seconds (such as 12.250)"))?;
    if !METHODS.contains(&method) {
        return Err(format!(
            "the method {method:?} is not one loadgen sends ({})",
            METHODS.join(", ")
        ));
    }
    if !path.starts_with('/') || path.parse::<hyper::http::uri::PathAndQuery>().is_err() {
        return Err(format!(
            "the path {path:?} is not a URL path starting with /"
        ));
    }
    Ok(Some(Line { time, method, path }))
}

/// What a timetable holds, found by reading it through.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Its requests (lines that are not blank or comments).
    pub requests: u64,
    /// The first line's time.
    pub first: f64,
    /// The last line's time.
    pub last: f64,
}

/// A line of the file that is wrong, by its place.
fn at_line(path: &Path, line: usize, why: impl fmt::Display) -> LoadError {
    LoadError::InvalidSpec {
        field: "load.replay".into(),
        why: format!("{}:{line}: {why}", path.display()),
    }
}

/// The lines of a timetable in order, each checked, with its number; the times must not go back.
struct Lines {
    path: PathBuf,
    reader: std::io::Lines<std::io::BufReader<std::fs::File>>,
    number: usize,
    last: f64,
}

impl Lines {
    fn open(path: &Path) -> Result<Lines, LoadError> {
        let file = std::fs::File::open(path).map_err(|e| LoadError::InvalidSpec {
            field: "load.replay".into(),
            why: format!("cannot read the timetable {}: {e}", path.display()),
        })?;
        Ok(Lines {
            path: path.to_path_buf(),
            reader: std::io::BufReader::new(file).lines(),
            number: 0,
            last: f64::NEG_INFINITY,
        })
    }

    /// The next request: its time, method and path.
    fn next_request(&mut self) -> Result<Option<(f64, String, String)>, LoadError> {
        for text in self.reader.by_ref() {
            self.number += 1;
            let text = text.map_err(|e| at_line(&self.path, self.number, e))?;
            let Some(line) = parse_line(&text).map_err(|w| at_line(&self.path, self.number, w))?
            else {
                continue;
            };
            if line.time < self.last {
                return Err(at_line(
                    &self.path,
                    self.number,
                    format!(
                        "the time {} comes before the line above's {}: a timetable is in time order",
                        line.time, self.last
                    ),
                ));
            }
            self.last = line.time;
            return Ok(Some((line.time, line.method.into(), line.path.into())));
        }
        Ok(None)
    }
}

impl Replay {
    /// A replay of `file` as recorded: from its first line, at speed 1, every request once.
    pub fn file(file: impl Into<String>) -> Replay {
        Replay {
            file: file.into(),
            from: None,
            speed: 1.0,
            scale_rate: 1.0,
        }
    }

    /// Reads the timetable through and checks every line, the order of the times and the options; names the
    /// file and line of the first mistake.
    pub fn check(&self) -> Result<Summary, LoadError> {
        let bad = |field: &str, why: String| LoadError::InvalidSpec {
            field: format!("load.replay.{field}"),
            why,
        };
        if !(self.speed.is_finite() && self.speed > 0.0) {
            return Err(bad(
                "speed",
                format!("{} must be a number above 0", self.speed),
            ));
        }
        if !(self.scale_rate.is_finite() && self.scale_rate > 0.0) {
            return Err(bad(
                "scale_rate",
                format!("{} must be a number above 0", self.scale_rate),
            ));
        }
        let path = Path::new(&self.file);
        let mut lines = Lines::open(path)?;
        let mut summary: Option<Summary> = None;
        while let Some((time, _, _)) = lines.next_request()? {
            match &mut summary {
                None => {
                    if let Some(from) = self.from.filter(|f| time < *f) {
                        return Err(at_line(
                            path,
                            lines.number,
                            format!("the time {time} comes before the replay's `from` ({from})"),
                        ));
                    }
                    summary = Some(Summary {
                        requests: 1,
                        first: time,
                        last: time,
                    });
                }
                Some(s) => {
                    s.requests += 1;
                    s.last = time;
                }
            }
        }
        summary.ok_or_else(|| LoadError::InvalidSpec {
            field: "load.replay".into(),
            why: format!("the timetable {} holds no request", path.display()),
        })
    }

    /// Multiplies every offset by `factor` (the run's time scale).
    pub fn scale_time(&mut self, factor: f64) {
        if factor > 0.0 {
            self.speed /= factor;
        }
    }
}

/// One arrival of a timetable: when, and (for a replay) the request itself, ready for the run's protocol.
pub(crate) struct Arrival<R> {
    /// From the run's origin.
    pub(crate) intended: Duration,
    /// The request to send; `None` when the mix chooses it.
    pub(crate) request: Option<R>,
}

/// A replay being played: the file's lines as arrivals, read as they are due, each line's request made once by
/// `render` (from its method and path) and shared by its copies.
pub(crate) struct Player<R, F> {
    lines: Lines,
    from: Option<f64>,
    speed: f64,
    scale_rate: f64,
    rng: StdRng,
    render: F,
    /// The copies of the current line still to hand out.
    due: VecDeque<Arrival<R>>,
    /// The line after the current one, read ahead to spread the current one's copies.
    ahead: Option<(f64, String, String)>,
    end: Duration,
    done: bool,
}

impl<R: Clone, F: Fn(&str, &str) -> R> Player<R, F> {
    /// Opens the timetable of a checked replay, for a run of `end`.
    pub(crate) fn open(
        replay: &Replay,
        seed: u64,
        end: Duration,
        render: F,
    ) -> Result<Player<R, F>, LoadError> {
        let mut lines = Lines::open(Path::new(&replay.file))?;
        let ahead = lines.next_request()?;
        Ok(Player {
            from: replay.from.or(ahead.as_ref().map(|a| a.0)),
            lines,
            speed: replay.speed,
            scale_rate: replay.scale_rate,
            rng: StdRng::seed_from_u64(seed ^ SCALE_SEED_SALT),
            render,
            due: VecDeque::new(),
            ahead,
            end,
            done: false,
        })
    }

    fn offset(&self, time: f64) -> Duration {
        let s = ((time - self.from.unwrap_or(0.0)) / self.speed).max(0.0);
        Duration::from_nanos((s * 1e9).round() as u64)
    }
}

impl<R: Clone, F: Fn(&str, &str) -> R> Iterator for Player<R, F> {
    type Item = Arrival<R>;

    fn next(&mut self) -> Option<Arrival<R>> {
        loop {
            if let Some(a) = self.due.pop_front() {
                if a.intended >= self.end {
                    self.done = true;
                    self.due.clear();
                    return None;
                }
                return Some(a);
            }
            if self.done {
                return None;
            }
            // The file was checked before the run; a line that broke since ends the timetable there.
            let (time, method, path) = self.ahead.take()?;
            self.ahead = self.lines.next_request().ok().flatten();
            let whole = self.scale_rate.floor();
            let extra = self.scale_rate - whole;
            let copies = whole as u64 + u64::from(extra > 0.0 && self.rng.random::<f64>() < extra);
            let gap = self.ahead.as_ref().map_or(0.0, |a| a.0 - time);
            let request = (self.render)(&method, &path);
            for j in 0..copies {
                self.due.push_back(Arrival {
                    intended: self.offset(time + gap * j as f64 / copies as f64),
                    request: Some(request.clone()),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timetable(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("loadgen-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn play(replay: &Replay, seed: u64, end: f64) -> Vec<(Duration, String)> {
        let target = crate::target::Target::parse("http://127.0.0.1:9", &[]).unwrap();
        let render = crate::request::http1::replayed(&target);
        Player::open(replay, seed, Duration::from_secs_f64(end), render)
            .unwrap()
            .map(|a| {
                let text = String::from_utf8(a.request.unwrap().bytes.to_vec()).unwrap();
                (a.intended, text.lines().next().unwrap().to_string())
            })
            .collect()
    }

    const TABLE: &str =
        "# recorded\n1000.000 GET /a?x=1\n1000.250 POST /b\n\n1001.000 GET /c\n1003.000 HEAD /d\n";

    #[test]
    fn each_line_is_sent_at_its_offset_from_the_start_with_its_method_and_path() {
        let path = timetable("exact.txt", TABLE);
        let r = Replay::file(path.to_str().unwrap());
        assert_eq!(
            r.check().unwrap(),
            Summary {
                requests: 4,
                first: 1000.0,
                last: 1003.0
            }
        );
        let sent = play(&r, 1, 10.0);
        assert_eq!(
            sent,
            vec![
                (Duration::ZERO, "GET /a?x=1 HTTP/1.1".to_string()),
                (Duration::from_millis(250), "POST /b HTTP/1.1".to_string()),
                (Duration::from_secs(1), "GET /c HTTP/1.1".to_string()),
                (Duration::from_secs(3), "HEAD /d HTTP/1.1".to_string()),
            ]
        );
        // `from` sets t = 0, `speed` divides the offsets, the run's end cuts the timetable.
        let fast = Replay {
            from: Some(999.0),
            speed: 2.0,
            ..r.clone()
        };
        let times: Vec<Duration> = play(&fast, 1, 1.0).into_iter().map(|s| s.0).collect();
        assert_eq!(
            times,
            vec![Duration::from_millis(500), Duration::from_millis(625)]
        );
    }

    #[test]
    fn scale_rate_repeats_or_thins_each_line_by_the_seed_spreading_copies_over_the_gap() {
        let lines: String = (0..1000)
            .map(|i| format!("{} GET /p/{i}\n", i as f64 / 100.0))
            .collect();
        let path = timetable("scale.txt", &lines);
        let double = Replay {
            scale_rate: 2.0,
            ..Replay::file(path.to_str().unwrap())
        };
        let sent = play(&double, 1, 100.0);
        assert_eq!(sent.len(), 2000);
        assert_eq!(sent[0], (Duration::ZERO, "GET /p/0 HTTP/1.1".into()));
        assert_eq!(
            sent[1],
            (Duration::from_millis(5), "GET /p/0 HTTP/1.1".into())
        );
        assert!(sent.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
        let half = Replay {
            scale_rate: 0.5,
            ..double.clone()
        };
        let kept = play(&half, 7, 100.0);
        // Binomial(1000, 0.5): sd 16; five sd is a bound a fixed seed keeps deterministic.
        assert!((kept.len() as i64 - 500).abs() < 80, "{}", kept.len());
        assert_eq!(
            kept,
            play(&half, 7, 100.0),
            "the same seed thins the same lines"
        );
        assert_ne!(kept, play(&half, 8, 100.0));
    }

    #[test]
    fn a_bad_line_is_named_by_file_and_line() {
        for (text, line, why) in [
            ("1 GET /a\n0.5 GET /b\n", 2, "comes before"),
            ("1 GET /a\nx GET /b\n", 2, "not seconds"),
            ("# c\n1 BREW /a\n", 2, "not one loadgen sends"),
            ("1 GET a\n", 1, "starting with /"),
            ("1 GET /a b\n", 1, "TIME METHOD PATH"),
        ] {
            let path = timetable("bad.txt", text);
            let e = Replay::file(path.to_str().unwrap())
                .check()
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("bad.txt:{line}:")) && e.contains(why),
                "{text:?}: {e}"
            );
        }
        let empty = timetable("empty.txt", "# nothing\n");
        let e = Replay::file(empty.to_str().unwrap())
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds no request"), "{e}");
        let e = Replay::file("/nonexistent/t.txt")
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read the timetable"), "{e}");
    }

    #[test]
    fn the_short_form_is_a_file_and_the_long_form_takes_options() {
        let r: Replay = serde_saphyr::from_str("t.txt").unwrap();
        assert_eq!(r, Replay::file("t.txt"));
        let r: Replay = serde_saphyr::from_str("{ file: t.txt, from: 12.5, speed: 4 }").unwrap();
        assert_eq!((r.from, r.speed, r.scale_rate), (Some(12.5), 4.0, 1.0));
        assert!(serde_saphyr::from_str::<Replay>("{ file: t.txt, rate: 2 }").is_err());
    }
}
