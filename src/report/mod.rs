//! The files a run leaves behind, under `reports/<scenario>/<UTC timestamp>/`: `result.json` (every figure and
//! verdict, versioned), `summary.txt` (also printed), `junit.xml`, the HdrHistogram files (`.hgrm` per phase,
//! `sut.hlog`), the self-contained `report.html`, the run's CA (`ca.pem`) when the dependency minted one for TLS, each
//! request followed through the SUT (`requests.csv`, `calls.csv`) when the run correlated, and
//! the raw recordings (`load.json`, `dependency.json`) that let `faultline report` render everything again. `compare` sets two saved runs side by side.
//! A long run's time series are written at a coarser bucket (`rollup`), so a soak run's folder stays bounded.
//!
//! Not for judging: verdicts arrive already made. Rendering reads only what was saved, so a report can be rebuilt
//! from a run directory on another machine.

pub mod compare;
pub mod hdr;
pub mod html;
pub mod junit;
pub mod markdown;
pub mod result;
pub mod rollup;
pub mod summary;

use std::path::{Path, PathBuf};

use crate::run::RunOutput;
use crate::scenario::Validated;

pub use compare::{compare, Comparison};
pub use result::{ResultFile, RESULT_VERSION};

/// Why the report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {message}")]
    Read { path: PathBuf, message: String },
}

/// The default folder of a run: `reports/<scenario>/<UTC timestamp>`.
pub fn default_dir(root: &Path, scenario: &str, started: std::time::SystemTime) -> PathBuf {
    root.join(scenario).join(stamp(started))
}

/// A UTC time as report folders are named: `2026-11-30T09-00-00Z` (RFC 3339 with `-` for `:`, which some file
/// systems refuse).
pub fn stamp(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace(':', "-")
}

/// Writes every file of the report into `dir` and returns the result that was saved.
pub fn write(
    dir: &Path,
    v: &Validated,
    out: &RunOutput,
    time_scale: f64,
    exit_code: i32,
) -> Result<ResultFile, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let result = ResultFile::build(v, out, time_scale, exit_code);
    if let Some(pem) = &out.ca_pem {
        write_text(&dir.join(result::CA_FILE), pem)?;
    }
    if let Some(join) = &out.record.requests {
        write_text(
            &dir.join(crate::correlate::files::REQUESTS_FILE),
            &crate::correlate::files::requests_csv(join),
        )?;
        write_text(
            &dir.join(crate::correlate::files::CALLS_FILE),
            &crate::correlate::files::calls_csv(join),
        )?;
    }
    save(dir, result, &out.load, &out.dependency)
}

/// Writes a run's saved data (result.json, load.json, dependency.json) into `dir`, a long run's time series rolled
/// up to a width that bounds them (`rollup`), renders every other file from what was written, and returns the
/// result as saved. The verdicts in `result` were decided on the full record; only the series get coarser.
pub fn save(
    dir: &Path,
    mut result: ResultFile,
    load: &loadgen::Recording,
    dependency: &faultd::Recording,
) -> Result<ResultFile, ReportError> {
    let k = rollup::factor(
        load.bucket.get(),
        planned_buckets(&result, load, dependency),
    );
    let load = rollup::load(load, k);
    let dependency = rollup::dependency(dependency, k);
    result.series = rollup::series(&result.series, k, &load);
    if let Some(dns) = &mut result.dns {
        rollup::dns(dns, k);
    }
    write_json(&dir.join("result.json"), &result)?;
    // The recordings are for programs (`faultline report`, `size`), so compact: indenting them doubled their size.
    write_compact_json(&dir.join("load.json"), &load)?;
    write_compact_json(&dir.join("dependency.json"), &dependency)?;
    render(dir, &result, &load, &dependency)?;
    Ok(result)
}

/// How many buckets the run's length makes: its planned duration over its bucket (the series may hold a few more,
/// the calls that ended after it), or the longest series for a recording without a duration.
fn planned_buckets(
    result: &ResultFile,
    load: &loadgen::Recording,
    dependency: &faultd::Recording,
) -> usize {
    let (duration, bucket) = (load.duration.get(), load.bucket.get());
    if !duration.is_zero() && !bucket.is_zero() {
        return duration.as_nanos().div_ceil(bucket.as_nanos()) as usize;
    }
    let routes = dependency.routes.values().map(|r| r.buckets.len());
    routes
        .chain([result.series.offered.len(), load.buckets.len()])
        .max()
        .unwrap_or(0)
}

/// Writes result.json and summary.txt again from `result`, once the run's exports have said what they could not do.
pub fn write_result(dir: &Path, result: &ResultFile) -> Result<(), ReportError> {
    write_json(&dir.join("result.json"), result)?;
    write_text(&dir.join("summary.txt"), &summary::text(result))
}

/// Renders every human-facing file from a saved result and the saved recordings: summary.txt, junit.xml, the
/// `.hgrm` files, sut.hlog and report.html.
pub fn render(
    dir: &Path,
    result: &ResultFile,
    load: &loadgen::Recording,
    dependency: &faultd::Recording,
) -> Result<(), ReportError> {
    write_text(&dir.join("summary.txt"), &summary::text(result))?;
    write_text(&dir.join("junit.xml"), &junit::junit(result))?;
    hdr::write_files(dir, load, dependency, started(result))?;
    write_text(
        &dir.join("report.html"),
        &html::page(result, load, dependency),
    )?;
    Ok(())
}

/// Rebuilds every file of a run directory from its result.json, load.json and dependency.json (what
/// `faultline report RUN_DIR` does), and returns the result.
pub fn rerender(dir: &Path) -> Result<ResultFile, ReportError> {
    let result = read(dir)?;
    let load: loadgen::Recording = read_json(&dir.join("load.json"))?;
    let dependency: faultd::Recording = read_json(&dir.join("dependency.json"))?;
    render(dir, &result, &load, &dependency)?;
    Ok(result)
}

/// The run's origin from result.json's `started_at` (RFC 3339), for the interval log's StartTime; the Unix
/// epoch if it does not parse, so a hand-edited result still renders.
fn started(result: &ResultFile) -> std::time::SystemTime {
    humantime::parse_rfc3339_weak(&result.started_at).unwrap_or(std::time::UNIX_EPOCH)
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ReportError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| ReportError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Reads a run directory's result.json.
pub fn read(dir: &Path) -> Result<ResultFile, ReportError> {
    read_json(&dir.join("result.json"))
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), ReportError> {
    write_serialized(path, serde_json::to_string_pretty(value))
}

fn write_compact_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), ReportError> {
    write_serialized(path, serde_json::to_string(value))
}

fn write_serialized(path: &Path, text: serde_json::Result<String>) -> Result<(), ReportError> {
    let text = text.map_err(|e| ReportError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    write_text(path, &text)
}

fn write_text(path: &Path, text: &str) -> Result<(), ReportError> {
    std::fs::write(path, text).map_err(|source| ReportError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// A latency in milliseconds as a table shows it: `-` for none, whole at 100 ms and above, two decimals below.
fn ms_figure(v: f64) -> String {
    if v == 0.0 {
        "-".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}
