//! The YAML locator: where each field of a YAML document is, read off the YAML parser's own events, so that an
//! error found after parsing ("phase 2 names an unknown route", in a scenario or a faultd configuration) still
//! points at a line and column, and a parse error's position names its field.
//!
//! For: mapping dotted paths (`phases[1].routes.pricing`) to positions and back. Not for: reading values; serde
//! does that.

use serde_saphyr::granit_parser::{Event, Parser};

/// Positions of every key and sequence item of a document, in document order.
#[derive(Debug, Default)]
pub struct YamlIndex {
    /// (dotted path, 1-based line, 1-based column).
    entries: Vec<(String, usize, usize)>,
}

enum Frame {
    Map { path: String, key: Option<String> },
    Seq { path: String, index: usize },
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

impl YamlIndex {
    /// Indexes `text`; a document that does not parse is indexed up to the error.
    pub fn build(text: &str) -> YamlIndex {
        let mut entries = Vec::new();
        let mut stack: Vec<Frame> = Vec::new();
        for event in Parser::new_from_str(text) {
            let Ok((event, span)) = event else { break };
            let (line, column) = (span.start.line(), span.start.col() + 1);
            match event {
                Event::Scalar(value, ..) => match stack.last_mut() {
                    Some(Frame::Map { path, key }) => match key {
                        None => {
                            entries.push((join(path, &value), line, column));
                            *key = Some(value.into_owned());
                        }
                        Some(_) => *key = None,
                    },
                    Some(Frame::Seq { path, index }) => {
                        entries.push((format!("{path}[{index}]"), line, column));
                        *index += 1;
                    }
                    None => {}
                },
                Event::Alias(_) => match stack.last_mut() {
                    Some(Frame::Map { key, .. }) => *key = None,
                    Some(Frame::Seq { index, .. }) => *index += 1,
                    None => {}
                },
                Event::MappingStart(..) | Event::SequenceStart(..) => {
                    let path = match stack.last_mut() {
                        Some(Frame::Map { path, key }) => {
                            join(path, &key.take().unwrap_or_else(|| "?".to_string()))
                        }
                        Some(Frame::Seq { path, index }) => {
                            let p = format!("{path}[{index}]");
                            entries.push((p.clone(), line, column));
                            *index += 1;
                            p
                        }
                        None => String::new(),
                    };
                    stack.push(if matches!(event, Event::MappingStart(..)) {
                        Frame::Map { path, key: None }
                    } else {
                        Frame::Seq { path, index: 0 }
                    });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                }
                _ => {}
            }
        }
        YamlIndex { entries }
    }

    /// The position of `field` exactly as written in the document, if it is there.
    pub fn position(&self, field: &str) -> Option<(usize, usize)> {
        self.entries
            .iter()
            .find(|(p, _, _)| p == field)
            .map(|(_, l, c)| (*l, *c))
    }

    /// The position of `field`, or of its nearest ancestor present in the document.
    pub fn locate(&self, field: &str) -> Option<(usize, usize)> {
        let mut path = field.to_string();
        loop {
            if let Some((_, l, c)) = self.entries.iter().find(|(p, _, _)| *p == path) {
                return Some((*l, *c));
            }
            let cut = path.rfind(['.', '['])?;
            path.truncate(cut);
        }
    }

    /// The path of the last key or item that starts at or before (`line`, `column`): the field a parse error at
    /// that position is about.
    pub fn field_at(&self, line: usize, column: usize) -> String {
        self.entries
            .iter()
            .rev()
            .find(|(_, l, c)| (*l, *c) <= (line, column))
            .map(|(p, _, _)| p.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "routes:\n  pricing: { path: /price/*, latency: { fixed: 40ms } }\nphases:\n  - name: a\n    at: 0s\n  - { name: b, at: 5s, routes: { pricing: healthy } }\n";

    #[test]
    fn paths_point_at_their_keys() {
        let index = YamlIndex::build(DOC);
        assert_eq!(index.locate("routes.pricing.latency.fixed"), Some((2, 41)));
        assert_eq!(index.locate("phases[0].at"), Some((5, 5)));
        assert_eq!(index.locate("phases[1].routes.pricing"), Some((6, 34)));
        // Unknown leaves fall back to the nearest ancestor that exists.
        assert_eq!(
            index.locate("phases[1].routes.pricing.latency"),
            Some((6, 34))
        );
    }

    #[test]
    fn a_position_names_the_field_it_is_in() {
        let index = YamlIndex::build(DOC);
        assert_eq!(index.field_at(2, 47), "routes.pricing.latency.fixed");
        assert_eq!(index.field_at(5, 9), "phases[0].at");
    }
}
