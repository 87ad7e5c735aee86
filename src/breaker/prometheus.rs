//! A reader of the Prometheus text exposition format (version 0.0.4), for scraping a SUT's breaker metrics.
//!
//! Ours, small and strict where it matters: label values keep their escapes (`\\`, `\"`, `\n`) decoded exactly,
//! and a page with lines we do not understand is still read for the lines we do, with the bad ones reported.
//! Not a full OpenMetrics reader: exemplars and `# EOF` are ignored, histograms are just their series.

use std::collections::BTreeMap;

/// One series value from a scraped page.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A line that could not be read, with its 1-based number and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    pub line: usize,
    pub why: String,
}

/// Reads every sample of a page; comments and blank lines are skipped, unreadable lines reported.
pub fn parse(page: &str) -> (Vec<Sample>, Vec<BadLine>) {
    let mut samples = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in page.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_line(line) {
            Ok(s) => samples.push(s),
            Err(why) => bad.push(BadLine { line: i + 1, why }),
        }
    }
    (samples, bad)
}

fn parse_line(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value after the metric name")?;
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, tail) = parse_labels(after_brace)?;
        labels = parsed;
        rest = tail;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = match value {
        "NaN" => f64::NAN,
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse::<f64>().map_err(|_| format!("bad value {v:?}"))?,
    };
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// A series selector as an expectation writes it, `name` or `name{a="x",b="y"}`: the metric's name and the
/// labels a series must carry (others it may carry too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

impl Selector {
    /// Reads a selector, or says what is wrong with it.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let text = text.trim();
        let name_end = text.find('{').unwrap_or(text.len());
        let name = text[..name_end].trim();
        if name.is_empty()
            || name.starts_with(|c: char| c.is_ascii_digit())
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            return Err(format!(
                "{text:?} is not a metric name, or a name with labels like `name{{label=\"value\"}}`"
            ));
        }
        let mut labels = BTreeMap::new();
        if let Some(after_brace) = text[name_end..].strip_prefix('{') {
            let (parsed, tail) = parse_labels(after_brace).map_err(|e| format!("{text:?}: {e}"))?;
            if !tail.trim().is_empty() {
                return Err(format!(
                    "{text:?}: nothing may follow the labels' closing brace"
                ));
            }
            labels = parsed;
        }
        Ok(Selector {
            name: name.to_string(),
            labels,
        })
    }

    /// Whether a sample belongs to the selected series.
    pub fn matches(&self, s: &Sample) -> bool {
        s.name == self.name && self.labels.iter().all(|(k, v)| s.labels.get(k) == Some(v))
    }
}

/// Reads `a="x",b="y"}` and returns the labels and what follows the closing brace.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start();
        if let Some(tail) = rest.strip_prefix('}') {
            return Ok((labels, tail));
        }
        let eq = rest.find('=').ok_or("a label without '='")?;
        let key = rest[..eq].trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("bad label name {key:?}"));
        }
        rest = rest[eq + 1..].trim_start();
        rest = rest
            .strip_prefix('"')
            .ok_or("a label value must be quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, c)) => {
                        value.push('\\');
                        value.push(c);
                    }
                    None => return Err("unterminated label value".into()),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.insert(key.to_string(), value);
        rest = rest[end + 1..].trim_start();
        if let Some(tail) = rest.strip_prefix(',') {
            rest = tail;
        } else if !rest.starts_with('}') {
            return Err("expected ',' or '}' after a label".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_read_a_name_and_the_labels_a_series_must_carry() {
        let s = Selector::parse(r#"hikaricp_connections_active{pool="main"}"#).unwrap();
        assert_eq!(s.name, "hikaricp_connections_active");
        assert_eq!(s.labels["pool"], "main");
        let (samples, _) = parse("hikaricp_connections_active{pool=\"main\",app=\"x\"} 3\nhikaricp_connections_active{pool=\"other\"} 9\n");
        assert!(s.matches(&samples[0]));
        assert!(!s.matches(&samples[1]));
        assert!(Selector::parse("retries_total").unwrap().labels.is_empty());
        for bad in ["", "9lives", "a b", "x{y}", r#"x{y="1"} z"#, r#"x{y="1""#] {
            assert!(Selector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_names_labels_and_values_and_skips_comments() {
        let page = "# HELP circuit_breaker_state State\n# TYPE circuit_breaker_state gauge\n\
                    circuit_breaker_state{dependency=\"pricing\",operation=\"pricing\",instance=\"0\"} 1\n\
                    up 1 1700000000000\n";
        let (samples, bad) = parse(page);
        assert!(bad.is_empty());
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].name, "circuit_breaker_state");
        assert_eq!(samples[0].labels["operation"], "pricing");
        assert_eq!(samples[0].value, 1.0);
        assert_eq!(samples[1].name, "up");
        assert!(samples[1].labels.is_empty());
    }

    #[test]
    fn escaped_label_values_are_decoded_exactly() {
        let (samples, bad) =
            parse(r#"m{path="C:\\dir",q="say \"hi\"",nl="a\nb",comma="x,y}z"} 2.5"#);
        assert!(bad.is_empty(), "{bad:?}");
        let l = &samples[0].labels;
        assert_eq!(l["path"], "C:\\dir");
        assert_eq!(l["q"], "say \"hi\"");
        assert_eq!(l["nl"], "a\nb");
        assert_eq!(l["comma"], "x,y}z");
        assert_eq!(samples[0].value, 2.5);
    }

    #[test]
    fn special_values_and_trailing_commas_are_valid() {
        let (samples, bad) = parse("a{x=\"1\",} NaN\nb +Inf\nc -Inf\nd 1e3\n");
        assert!(bad.is_empty(), "{bad:?}");
        assert!(samples[0].value.is_nan());
        assert_eq!(samples[1].value, f64::INFINITY);
        assert_eq!(samples[2].value, f64::NEG_INFINITY);
        assert_eq!(samples[3].value, 1000.0);
    }

    #[test]
    fn bad_lines_are_reported_with_their_number_and_the_rest_is_kept() {
        let (samples, bad) = parse("good 1\nbad{x=1} 2\nalso_good 3\nnovalue\n");
        assert_eq!(samples.len(), 2);
        assert_eq!(bad.iter().map(|b| b.line).collect::<Vec<_>>(), vec![2, 4]);
    }
}
