//! The placeholders of a SUT command, its environment and its URL (`{faultd.url}`, `{sut.port}`, `{ms:250ms}`, ...):
//! which names exist, checking a scenario's text against them, and rendering them once the ports are known. Not for
//! choosing the values: `run` fills them in when it starts the components.

use std::collections::BTreeMap;

use faultline_units::Dur;

/// The placeholders a SUT command, its environment and its URL may use.
pub struct Placeholders {
    pub values: BTreeMap<String, String>,
    pub scale: f64,
}

impl Placeholders {
    /// The path of the run's CA file (PEM), known when the embedded faultd has a `tls:` section: a command SUT
    /// trusts it as it would a real CA (`SSL_CERT_FILE={faultd.ca}`, `--cacert {faultd.ca}`).
    pub const CA: &'static str = "faultd.ca";

    /// The names known before a run starts; the scaled durations (`{ms:..}`, `{secs:..}`, `{dur:..}`) come on top.
    pub fn names() -> Vec<String> {
        [
            "faultd.url",
            "faultd.host",
            "faultd.port",
            "faultd.control",
            "sut.port",
            "sut.url",
            "webhook.url",
            "seed",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// The placeholders of TCP route `route`: where the SUT connects to reach the real dependency through faultd
    /// (`{faultd.routes.db.host}`, `.port`, and `.addr` for `host:port`).
    pub fn tcp_route_names(route: &str) -> Vec<String> {
        ["host", "port", "addr"]
            .iter()
            .map(|p| format!("faultd.routes.{route}.{p}"))
            .collect()
    }

    /// Checks every `{...}` in `text`; returns the first unknown name.
    pub(super) fn check(text: &str, known: &[String]) -> Result<(), String> {
        for name in braces(text) {
            let scaled = ["ms:", "secs:", "dur:"]
                .iter()
                .find_map(|p| name.strip_prefix(p));
            match scaled {
                Some(d) if d.parse::<Dur>().is_ok() => {}
                Some(_) => return Err(name.to_string()),
                None if known.iter().any(|k| k == name) => {}
                None => return Err(name.to_string()),
            }
        }
        Ok(())
    }

    /// Replaces every placeholder; durations in `{ms:..}`, `{secs:..}`, `{dur:..}` are scaled.
    pub fn render(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else {
                break;
            };
            let name = &rest[open + 1..open + close];
            out.push_str(&rest[..open]);
            let value =
                if let Some(d) = name.strip_prefix("ms:").and_then(|d| d.parse::<Dur>().ok()) {
                    format!("{}", d.scaled(self.scale).get().as_millis())
                } else if let Some(d) = name
                    .strip_prefix("secs:")
                    .and_then(|d| d.parse::<Dur>().ok())
                {
                    let s = d.scaled(self.scale).as_secs_f64();
                    if s.fract() == 0.0 {
                        format!("{s:.0}")
                    } else {
                        format!("{s}")
                    }
                } else if let Some(d) = name
                    .strip_prefix("dur:")
                    .and_then(|d| d.parse::<Dur>().ok())
                {
                    d.scaled(self.scale).to_string()
                } else if let Some(v) = self.values.get(name) {
                    v.clone()
                } else {
                    rest[open..open + close + 1].to_string()
                };
            out.push_str(&value);
            rest = &rest[open + close + 1..];
        }
        out.push_str(rest);
        out
    }
}

/// The text inside each `{...}` of `text`.
fn braces(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices('{')
        .filter_map(move |(i, _)| text[i + 1..].find('}').map(|j| &text[i + 1..i + 1 + j]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_render_ports_and_scaled_durations() {
        let p = Placeholders {
            values: BTreeMap::from([
                (
                    "faultd.url".to_string(),
                    "http://127.0.0.1:9000".to_string(),
                ),
                ("sut.port".to_string(), "8080".to_string()),
            ]),
            scale: 0.1,
        };
        assert_eq!(
            p.render("--dep={faultd.url} --port {sut.port}"),
            "--dep=http://127.0.0.1:9000 --port 8080"
        );
        assert_eq!(
            p.render("--timeout-ms={ms:250ms} --open={secs:30s} --t={dur:2s}"),
            "--timeout-ms=25 --open=3 --t=200ms"
        );
        assert!(Placeholders::check("{faultd.url}{ms:5s}", &Placeholders::names()).is_ok());
        assert_eq!(
            Placeholders::check("{faultd.uri}", &Placeholders::names()),
            Err("faultd.uri".into())
        );
        assert_eq!(
            Placeholders::check("{ms:5 sec}", &Placeholders::names()),
            Err("ms:5 sec".into())
        );
        let mut known = Placeholders::names();
        known.extend(Placeholders::tcp_route_names("db"));
        assert!(Placeholders::check("redis://{faultd.routes.db.addr}/0", &known).is_ok());
        assert_eq!(
            Placeholders::check("{faultd.routes.cache.port}", &known),
            Err("faultd.routes.cache.port".into())
        );
    }
}
