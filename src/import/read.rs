//! Reading a record's files: line by line for access logs (each line capped, never the whole file in memory), a
//! document at a time for HAR and OTLP/JSON (capped by `--max-input-size`), every entry handed to the pipeline.

use super::*;

pub(super) fn read_error(path: &Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |source| ImportError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads one file into the sink, each line or document as its format says; `-` is standard input. A log is
/// streamed, so only its lines are capped; a document format is capped as a whole (a file by its size before it
/// is read, standard input as it is read).
pub(super) fn read_file(
    path: &Path,
    reader: Option<&dyn LineFormat>,
    options: &ImportOptions,
    progress: &mut progress::Progress,
    sink: &mut Sink,
) -> Result<(), ImportError> {
    let file: Box<dyn std::io::Read> = match reader {
        _ if path == Path::new(faultline_units::input::STDIN) => Box::new(std::io::stdin()),
        Some(_) => Box::new(open_regular(path)?),
        None => Box::new(open_capped(path, document_cap(options))?),
    };
    read_from(
        path,
        std::io::BufReader::new(progress.wrap(file)),
        reader,
        options,
        sink,
    )
}

pub(super) fn document_cap(options: &ImportOptions) -> Cap {
    Cap::by_flag(options.max_input_size, "--max-input-size")
}

/// How a log's next line came.
pub(super) enum Line {
    End,
    Within,
    TooLong,
}

/// Reads the next line into `line` without its end, reading no more than `cap` + 1 bytes of it: a line over the
/// cap (or `/dev/zero`, one endless line) is reported, never held.
pub(super) fn next_line(
    file: &mut impl BufRead,
    line: &mut Vec<u8>,
    cap: u64,
) -> std::io::Result<Line> {
    line.clear();
    let n = file.take(cap.saturating_add(1)).read_until(b'\n', line)?;
    if n == 0 {
        return Ok(Line::End);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        return Ok(Line::Within);
    }
    Ok(if n as u64 > cap {
        Line::TooLong
    } else {
        Line::Within
    })
}

/// Reads one record (a file's content) into the sink; `path` names it in messages.
pub(super) fn read_from(
    path: &Path,
    mut file: impl BufRead,
    reader: Option<&dyn LineFormat>,
    options: &ImportOptions,
    sink: &mut Sink,
) -> Result<(), ImportError> {
    let before = sink.lines;
    match (reader, &options.format) {
        (Some(reader), _) => {
            let cap = options.max_line_length;
            let mut bytes = Vec::new();
            let mut number = 0;
            loop {
                number += 1;
                match next_line(&mut file, &mut bytes, cap.bytes()).map_err(read_error(path))? {
                    Line::End => break,
                    Line::TooLong => {
                        return Err(ImportError::LineTooLong {
                            path: path.to_path_buf(),
                            line: number,
                            cap,
                        })
                    }
                    Line::Within => {}
                }
                let line = std::str::from_utf8(&bytes).map_err(|e| ImportError::Read {
                    path: path.to_path_buf(),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
                })?;
                if line.trim().is_empty() {
                    continue;
                }
                sink.lines += 1;
                let entry = reader
                    .parse(line)
                    .map(|r| r.map(Entry::Request))
                    .map_err(|why| format!("{why}\n  {}", clip(line)));
                sink.add(path, number, entry);
            }
        }
        (None, Format::OtlpJson) => {
            let mut documents = otlp::Documents::new(file);
            while let Some(doc) = documents.next_document().map_err(read_error(path))? {
                match doc.spans {
                    Err(why) => {
                        sink.lines += 1;
                        sink.add(path, doc.line, Err(why));
                    }
                    Ok(spans) => {
                        for span in spans {
                            // Each span counts as a line, so that the share of bad ones is a share of spans.
                            sink.lines += 1;
                            sink.add(
                                path,
                                doc.line,
                                span.map_err(|w| format!("document on line {}: {w}", doc.line)),
                            );
                        }
                    }
                }
            }
        }
        (None, _) => {
            // A HAR is one document: each entry counts as a line, its index (from 1) as its place.
            let cap = options.max_input_size.bytes();
            let text = std::io::read_to_string(file.take(cap.saturating_add(1)))
                .map_err(read_error(path))?;
            if text.len() as u64 > cap {
                // A record held in memory is capped here; a file was refused by its size before it was read.
                return Err(InputError::TooLarge {
                    path: path.to_path_buf(),
                    cap: document_cap(options),
                }
                .into());
            }
            if text.trim().is_empty() {
                return Err(ImportError::Empty(path.to_path_buf()));
            }
            let entries = har::records(&text)
                .map_err(|m| ImportError::Format(format!("{}: {m}", path.display())))?;
            for (i, entry) in entries.into_iter().enumerate() {
                sink.lines += 1;
                let entry = entry
                    .map(|r| Some(Entry::Request(r)))
                    .map_err(|why| format!("entry {}: {why}", i + 1));
                sink.add(path, i + 1, entry);
            }
        }
    }
    if sink.lines == before {
        return Err(ImportError::Empty(path.to_path_buf()));
    }
    Ok(())
}
