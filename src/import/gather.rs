//! Reading a record whole: the options checked, every file read into one timeline, and the record refused when
//! it parsed to nothing, holds over 1% bad lines or its clock jumps. What an import writes a scenario from, and what
//! `faultline size` reads without writing one.
//!
//! Not for any format's lines (each format's file) nor for writing (`writer`).

use std::path::{Path, PathBuf};

use super::phases::{find_phases, PhaseSpan};
use super::timeline::Timeline;
use super::LineFormat;
use super::{
    display, line_format, progress, read_file, timetable, Format, ImportError, ImportOptions, Sink,
    BAD_SHARE, CLOCK_JUMP,
};

/// The options every import checks before it reads.
pub(super) fn check(options: &ImportOptions) -> Result<(), ImportError> {
    if !(options.speed.is_finite() && options.speed > 0.0) {
        return Err(ImportError::Option(format!(
            "--speed {} must be a number above 0",
            options.speed
        )));
    }
    if !(options.bucket.is_finite() && options.bucket >= 0.001) {
        return Err(ImportError::Option(format!(
            "--bucket {}s must be at least 1ms",
            options.bucket
        )));
    }
    if !(options.scale_rate.is_finite() && options.scale_rate > 0.0) {
        return Err(ImportError::Option(format!(
            "--scale-rate {} must be a number above 0",
            options.scale_rate
        )));
    }
    if options.log_format.is_some() && !matches!(options.format, Format::Nginx) {
        return Err(ImportError::Option(
            "--log-format is for --format nginx; for other layouts use --format regex:PATTERN"
                .into(),
        ));
    }
    Ok(())
}

/// A record read whole, before any scenario is written: its timeline bucket by bucket and the phases found in it.
/// What `faultline size` reads from an access log, a HAR file or a trace export.
#[derive(Debug)]
pub struct ReadRecord {
    pub timeline: Timeline,
    pub phases: Vec<PhaseSpan>,
}

/// Reads each of `paths` as `options.format` into a timeline and finds its phases, with the same checks an import
/// makes (something parsed, at most 1% bad lines, no jump of the clock), without writing a scenario.
pub fn read_record(paths: &[PathBuf], options: &ImportOptions) -> Result<ReadRecord, ImportError> {
    let mut progress = progress_over(paths, options);
    let sink = gather(paths, options, None, |path, reader, sink| {
        read_file(path, reader, options, &mut progress, sink)
    });
    progress.finish();
    let timeline = sink?.timeline;
    let phases = find_phases(&timeline);
    Ok(ReadRecord { timeline, phases })
}

/// The progress of reading `paths`, shown on stderr when `options` asks: the files' sizes add up to its whole.
pub(super) fn progress_over(paths: &[PathBuf], options: &ImportOptions) -> progress::Progress {
    let total: u64 = paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    progress::Progress::new(total, options.progress)
}

/// Checks the options and reads each of `paths` with `read` into a timeline; refuses a record that parsed to
/// nothing, holds over 1% bad lines, or whose clock jumps.
pub(super) fn gather<'a>(
    paths: &[PathBuf],
    options: &ImportOptions,
    timetable: Option<&'a mut timetable::Writer>,
    mut read: impl FnMut(&Path, Option<&dyn LineFormat>, &mut Sink) -> Result<(), ImportError>,
) -> Result<Sink<'a>, ImportError> {
    check(options)?;
    let reader = line_format(options)?;
    let mut sink = Sink {
        timeline: Timeline::new(options.bucket, options.redact),
        timetable,
        lines: 0,
        bad: 0,
        first_bad: Vec::new(),
    };
    for path in paths {
        read(path, reader.as_deref(), &mut sink)?;
    }
    let records = sink.timeline.records();
    if records == 0 {
        return Err(ImportError::NothingParsed {
            files: paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            format: options.format.to_string(),
            first: sink
                .first_bad
                .first()
                .map(|b| format!("; {}:{}: {}", b.path.display(), b.line, b.why))
                .unwrap_or_default(),
            hint: format_hint(options),
        });
    }
    let (bad, lines) = (sink.bad, sink.lines);
    if bad as f64 > BAD_SHARE * lines as f64 {
        let b = &sink.first_bad[0];
        let (why, text) = b.why.split_once("\n  ").unwrap_or((&b.why, ""));
        return Err(ImportError::TooManyBad {
            path: b.path.clone(),
            line: b.line,
            format: options.format.to_string(),
            why: format!("{why} ({bad} of {lines} lines are bad, over 1%)"),
            text: format!("{text}{}", format_hint(options)),
            bad,
            total: lines,
        });
    }
    if let Some((from, to)) = sink.timeline.clock_jump(CLOCK_JUMP) {
        return Err(ImportError::ClockJump {
            files: display(paths),
            from,
            to,
        });
    }
    Ok(sink)
}

/// What to try when lines do not read as the format: the option that says how they were written.
fn format_hint(options: &ImportOptions) -> String {
    match (&options.format, &options.log_format) {
        (Format::Nginx, None) => "\n  hint: --format nginx reads nginx's default `combined` lines; for lines of another \
             log_format, pass it with --log-format '$remote_addr - [$time_local] ...' (the format's text from \
             nginx.conf, without its name)"
            .into(),
        (Format::Nginx, Some(_)) => "\n  hint: --log-format must be the log_format the lines were written with, \
             variable for variable"
            .into(),
        (Format::Envoy | Format::Haproxy, _) => format!(
            "\n  hint: --format {} reads the default access log format; for another, describe its lines with \
             --format 'regex:PATTERN' (named groups time, method, path, status, duration, upstream, ...)",
            options.format
        ),
        _ => String::new(),
    }
}
