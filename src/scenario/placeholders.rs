//! The placeholders of a SUT command, its environment and its URL (`{faultd.url}`, `{sut.port}`, `{ms:250ms}`,
//! `faultline sweep`'s `{param.NAME}`, ...): which names exist, checking a scenario's text against them, and
//! rendering them once the ports are known. Not for choosing the values: `run` fills them in when it starts the
//! components, and `sweep` chooses the parameters.

use std::collections::{BTreeMap, BTreeSet};

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

    /// The resolver's `host:port` (UDP and TCP), known when the embedded faultd has a `dns:` section: a command
    /// SUT resolves its dependency's name there (`--resolver {faultd.dns}`, a resolv.conf it is given).
    pub const DNS: &'static str = "faultd.dns";

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

    /// The placeholders of route `route` served by `count` instances: `faultd.routes.NAME.instances`, the
    /// comma-separated base URLs of all of them (an HTTP route's) or their `host:port` (a TCP route's), and per
    /// instance (from 1) `faultd.routes.NAME.instance.N.addr`, `.host`, `.port`, and `.url` on an HTTP route.
    pub fn instance_names(route: &str, count: u32, tcp: bool) -> Vec<String> {
        let mut names = vec![format!("faultd.routes.{route}.instances")];
        for n in 1..=count {
            let fields: &[&str] = if tcp {
                &["addr", "host", "port"]
            } else {
                &["url", "addr", "host", "port"]
            };
            names.extend(
                fields
                    .iter()
                    .map(|f| format!("faultd.routes.{route}.instance.{n}.{f}")),
            );
        }
        names
    }

    /// The values of [`Placeholders::instance_names`] for instances listening on `addrs`, in order, with their
    /// base URLs when the route is HTTP (`urls`, one per address).
    pub fn instance_values(
        route: &str,
        addrs: &[std::net::SocketAddr],
        urls: Option<&[String]>,
    ) -> BTreeMap<String, String> {
        let list: Vec<String> = match urls {
            Some(urls) => urls.to_vec(),
            None => addrs.iter().map(ToString::to_string).collect(),
        };
        let mut values =
            BTreeMap::from([(format!("faultd.routes.{route}.instances"), list.join(","))]);
        for (n, addr) in (1..).zip(addrs) {
            let key = |f: &str| format!("faultd.routes.{route}.instance.{n}.{f}");
            values.insert(key("addr"), addr.to_string());
            values.insert(key("host"), addr.ip().to_string());
            values.insert(key("port"), addr.port().to_string());
            if let Some(url) = urls.and_then(|u| u.get(n - 1)) {
                values.insert(key("url"), url.clone());
            }
        }
        values
    }

    /// `faultline sweep`'s parameters as placeholders: `param.NAME`, the value as written, and for a value that is
    /// a duration `param.NAME.ms`, `param.NAME.secs` and `param.NAME.dur`, scaled by `scale` as `{ms:..}`,
    /// `{secs:..}` and `{dur:..}` are.
    pub fn params(params: &BTreeMap<String, String>, scale: f64) -> BTreeMap<String, String> {
        let mut values = BTreeMap::new();
        for (name, value) in params {
            values.insert(format!("{PARAM}{name}"), value.clone());
            if let Ok(d) = value.trim().parse::<Dur>() {
                for unit in SCALED {
                    values.insert(format!("{PARAM}{name}.{unit}"), scaled(unit, d, scale));
                }
            }
        }
        values
    }

    /// The parameters in `params` that no `{param.NAME...}` of `texts` reads.
    pub(super) fn unread<'a>(params: &'a BTreeMap<String, String>, texts: &[&str]) -> Vec<&'a str> {
        let read: BTreeSet<&str> = texts
            .iter()
            .flat_map(|t| braces(t))
            .filter_map(|name| name.strip_prefix(PARAM))
            .collect();
        params
            .keys()
            .filter(|p| {
                !read.iter().any(|r| {
                    r == p
                        || r.strip_prefix(p.as_str())
                            .is_some_and(|u| u.starts_with('.'))
                })
            })
            .map(String::as_str)
            .collect()
    }

    /// Checks every `{...}` in `text`; returns the first unknown name.
    pub(super) fn check(text: &str, known: &[String]) -> Result<(), String> {
        for name in braces(text) {
            match scaled_duration(name) {
                Some(Some(_)) => {}
                Some(None) => return Err(name.to_string()),
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
            let value = match scaled_duration(name) {
                Some(Some((unit, d))) => scaled(unit, d, self.scale),
                _ => match self.values.get(name) {
                    Some(v) => v.clone(),
                    None => rest[open..open + close + 1].to_string(),
                },
            };
            out.push_str(&value);
            rest = &rest[open + close + 1..];
        }
        out.push_str(rest);
        out
    }
}

/// The prefix of `faultline sweep`'s parameters.
pub(super) const PARAM: &str = "param.";

/// The forms of a scaled duration: `{ms:250ms}` (a number of milliseconds), `{secs:30s}` (of seconds),
/// `{dur:250ms}` (a duration as faultline writes it).
const SCALED: [&str; 3] = ["ms", "secs", "dur"];

/// A scaled duration's form and duration (`{ms:250ms}`); `Some(None)` for one whose duration does not parse, `None`
/// for a name of another kind.
fn scaled_duration(name: &str) -> Option<Option<(&'static str, Dur)>> {
    SCALED.iter().find_map(|unit| {
        let d = name.strip_prefix(unit)?.strip_prefix(':')?;
        Some(d.parse::<Dur>().ok().map(|d| (*unit, d)))
    })
}

/// `d` scaled by `scale`, written in `unit`'s form.
fn scaled(unit: &str, d: Dur, scale: f64) -> String {
    let d = d.scaled(scale);
    match unit {
        "ms" => format!("{}", d.get().as_millis()),
        "secs" => {
            let s = d.as_secs_f64();
            if s.fract() == 0.0 {
                format!("{s:.0}")
            } else {
                format!("{s}")
            }
        }
        _ => d.to_string(),
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
        known.extend(Placeholders::instance_names("pricing", 3, false));
        assert!(Placeholders::check("--to={faultd.routes.pricing.instances}", &known).is_ok());
        assert!(Placeholders::check("{faultd.routes.pricing.instance.3.url}", &known).is_ok());
        assert!(Placeholders::check("{faultd.routes.pricing.instance.3.port}", &known).is_ok());
        known.extend(Placeholders::instance_names("db", 2, true));
        assert!(Placeholders::check("{faultd.routes.db.instance.2.addr}", &known).is_ok());
        assert_eq!(
            Placeholders::check("{faultd.routes.db.instance.2.url}", &known),
            Err("faultd.routes.db.instance.2.url".into()),
            "a TCP instance has an address, not a URL"
        );
        assert_eq!(
            Placeholders::check("{faultd.routes.pricing.instance.4.url}", &known),
            Err("faultd.routes.pricing.instance.4.url".into())
        );
        assert_eq!(
            Placeholders::check("{faultd.routes.cache.port}", &known),
            Err("faultd.routes.cache.port".into())
        );
    }

    #[test]
    fn a_sweep_parameter_reaches_the_sut_as_written_and_a_duration_also_scaled() {
        let params = BTreeMap::from([
            ("timeout".to_string(), "250ms".to_string()),
            ("mode".to_string(), "eager".to_string()),
        ]);
        let p = Placeholders {
            values: Placeholders::params(&params, 0.5),
            scale: 0.5,
        };
        assert_eq!(
            p.render("{param.timeout} {param.timeout.ms} {param.timeout.secs} {param.timeout.dur} {param.mode}"),
            "250ms 125 0.125 125ms eager"
        );
        let known: Vec<String> = Placeholders::params(&params, 1.0).into_keys().collect();
        assert!(Placeholders::check("{param.timeout.ms} {param.mode}", &known).is_ok());
        assert_eq!(
            Placeholders::check("{param.mode.ms}", &known),
            Err("param.mode.ms".into()),
            "a value that is no duration has no scaled forms"
        );
    }

    #[test]
    fn a_parameter_is_read_by_any_of_its_forms_and_only_by_its_own_name() {
        let params = BTreeMap::from([
            ("timeout".to_string(), "1s".to_string()),
            ("time".to_string(), "2s".to_string()),
            ("reset".to_string(), "5s".to_string()),
        ]);
        let texts = ["--timeout={param.timeout.ms}", "RESET={param.reset}"];
        assert_eq!(Placeholders::unread(&params, &texts), vec!["time"]);
    }
}
