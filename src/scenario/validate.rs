//! Whole-scenario validation: the checks no single field can make alone (exactly one kind of SUT, known
//! placeholders, loopback hosts, names that resolve, unique expectation ids, a proof that can run), and each breaker's
//! observation resolved from its spec. Not for parsing or adjusting the scenario: `Scenario::parse_in` does that first.

use std::collections::BTreeMap;

use faultline_units::Dur;

use super::locate::{locate, locate_item};
use super::placeholders::PARAM;
use super::{
    check_host, BreakerSpec, ExternalFaultd, Observation, Placeholders, Scenario, ScenarioError,
    SutSpec, Validated,
};
use crate::breaker::scrape::{Encoding, Preset, StateMapping};
use crate::breaker::BreakerState;
use crate::expect::{Expectation, Names};

/// Places an error at a field of the scenario's text: the field's path, the text to look for, the message.
type At<'a> = dyn Fn(&str, &str, String) -> ScenarioError + 'a;

impl Scenario {
    pub(super) fn validate(self, text: &str, file: &str) -> Result<Validated, ScenarioError> {
        let at =
            |field: &str, needle: &str, message: String| locate(text, file, field, needle, message);
        // Every error is kept, not only the first: a file with three slips is fixed in one go.
        let mut errors: Vec<ScenarioError> = Vec::new();
        self.check_parts(&at, &mut errors);
        self.check_sut(&at, &mut errors);
        self.check_placeholders(&at, &mut errors, file);
        self.check_hosts(&at, &mut errors, text, file);
        self.check_running_service(&at, &mut errors);
        let (observations, expectations) = self.resolve_names(&at, &mut errors, file);
        self.check_ids_and_proof(&at, &mut errors, file);
        if !errors.is_empty() {
            return Err(ScenarioError::many(errors));
        }
        Ok(Validated {
            scenario: self,
            file: file.to_string(),
            expectations,
            breakers: observations,
        })
    }

    /// The run's name, duration and bucket, the dependency's routes and listener, the load.
    fn check_parts(&self, at: &At<'_>, errors: &mut Vec<ScenarioError>) {
        if self.name.trim().is_empty() || self.name.contains(['/', '\\']) {
            errors.push(at(
                "name",
                "name:",
                "the name must be non-empty and contain no slashes (it names a folder)".into(),
            ));
        }
        if self.duration.get().is_zero() {
            errors.push(at(
                "duration",
                "duration:",
                "the run needs a duration above zero".into(),
            ));
        }
        if let Some(b) = self.bucket {
            if b.get() < std::time::Duration::from_millis(1) {
                errors.push(at(
                    "bucket",
                    "bucket:",
                    "the bucket must be at least 1ms".into(),
                ));
            }
        }
        if self.dependency.routes.is_empty() {
            errors.push(at(
                "dependency.routes",
                "dependency:",
                "give the dependency at least one route: the calls the service makes to it (e.g. \
                 `pricing: { path: /price/* }`)"
                    .into(),
            ));
        }
        if let Some(listen) = &self.dependency.listen {
            if self.faultd.is_some() {
                errors.push(at(
                    "dependency.listen",
                    "listen:",
                    "a faultd started elsewhere (`faultd:`) listens where it was started (faultd --listen); \
                     `dependency.listen` places the embedded one"
                        .into(),
                ));
            }
            kept(
                errors,
                check_host(&format!("http://{listen}"), &self.allow_hosts)
                    .map_err(|m| at("dependency.listen", "listen:", m)),
            );
        }
        let dependency = self.dependency.validate().map_err(|e| {
            let field = if e.field.is_empty() {
                "dependency".to_string()
            } else {
                format!("dependency.{}", e.field)
            };
            at(&field, "dependency:", e.message.clone())
        });
        kept(errors, dependency);
        let load = self.load.validate().map_err(|e| match e {
            // The field is the load spec's own path (`load.rate[1].over`): placed at that key.
            loadgen::LoadError::InvalidSpec { field, why } => {
                let key = field.rsplit('.').next().unwrap_or("load");
                let key = key.split('[').next().unwrap_or(key);
                at(&field, &format!("{key}:"), why)
            }
            other => at("load", "load:", other.to_string()),
        });
        kept(errors, load);
    }

    /// The SUT: exactly one kind.
    fn check_sut(&self, at: &At<'_>, errors: &mut Vec<ScenarioError>) {
        let sut = &self.sut;
        match (&sut.demo, &sut.command, &sut.url) {
            (Some(d), None, None) => {
                kept(errors, d.validate().map_err(|e| at("sut.demo", "demo:", e.to_string())));
            }
            (None, Some(cmd), Some(_)) if !cmd.is_empty() => {}
            (None, Some(_), None) => errors.push(at("sut.command", "command:", "a command SUT needs `url:` (e.g. http://127.0.0.1:{sut.port})".into())),
            (None, None, Some(_)) => {}
            (None, None, None) => errors.push(at("sut", "sut:", "name the service under test: `demo: {}`, `command: [...]` with `url:`, or `url:` of a running service".into())),
            _ => errors.push(at("sut", "sut:", "choose one: `demo`, or `command` with `url`, or `url` alone".into())),
        }
    }

    /// Placeholders that exist, and `faultline sweep`'s parameters each read by the SUT.
    fn check_placeholders(&self, at: &At<'_>, errors: &mut Vec<ScenarioError>, file: &str) {
        let sut = &self.sut;
        let mut known = Placeholders::names();
        for (name, _) in self.dependency.tcp_routes() {
            known.extend(Placeholders::tcp_route_names(name));
        }
        // The instances' listeners are the embedded faultd's.
        if self.faultd.is_none() {
            for (name, route) in &self.dependency.routes {
                if let Some(n) = route.instances {
                    known.extend(Placeholders::instance_names(name, n, route.is_tcp()));
                }
            }
        }
        // The run's CA exists only when the embedded faultd terminates TLS with certificates it mints.
        if self.faultd.is_none() && self.dependency.tls.as_ref().is_some_and(|t| t.mints_ca()) {
            known.push(Placeholders::CA.to_string());
        }
        if self.faultd.is_none() && self.dependency.dns.is_some() {
            known.push(Placeholders::DNS.to_string());
        }
        known.extend(Placeholders::params(&sut.params, 1.0).into_keys());
        let texts: Vec<(&str, &String)> = sut
            .command
            .iter()
            .flatten()
            .map(|v| ("sut.command", v))
            .chain(sut.env.values().map(|v| ("sut.env", v)))
            .chain(sut.url.iter().map(|v| ("sut.url", v)))
            .chain(
                sut.demo
                    .iter()
                    .filter_map(|d| d.redis.as_ref())
                    .map(|v| ("sut.demo.redis", v)),
            )
            .chain(
                sut.demo
                    .iter()
                    .filter_map(|d| d.dns.as_ref())
                    .map(|d| ("sut.demo.dns.resolver", &d.resolver)),
            )
            .chain(
                sut.demo
                    .iter()
                    .filter_map(|d| d.postgres.as_ref())
                    .map(|v| ("sut.demo.postgres", v)),
            )
            .chain(
                sut.demo
                    .iter()
                    .flat_map(|d| d.operations.configured())
                    .flat_map(|(_, c)| c.endpoints.iter())
                    .map(|v| ("sut.demo.operations", v)),
            )
            .collect();
        for (field, value) in &texts {
            if let Err(name) = Placeholders::check(value, &known) {
                let message = match name.strip_prefix(PARAM) {
                    Some(param) => self.param_error(param),
                    None => format!("unknown placeholder {{{name}}}; known: {}, and {{ms:250ms}}, {{secs:30s}}, {{dur:250ms}} for scaled durations", known.join(", ")),
                };
                errors.push(at(field, &format!("{{{name}}}"), message));
            }
        }
        // The bundled demo reads no placeholders of a sweep: its parameters are merged into its config instead.
        let read: Vec<&str> = texts.iter().map(|(_, t)| t.as_str()).collect();
        let unread = match sut.demo {
            Some(_) => Vec::new(),
            None => Placeholders::unread(&sut.params, &read),
        };
        for name in unread {
            errors.push(ScenarioError::InvalidNoLine {
                file: file.to_string(),
                field: format!("--vary {name}"),
                message: format!(
                    "the SUT never reads this parameter: put {{{PARAM}{name}}} (or {{{PARAM}{name}.ms}}, .secs, .dur for a \
                     duration) in its `command`, `env` or `url`"
                ),
            });
        }
    }

    /// Why `{param.PARAM}` is refused: no sweep gives parameters, this one does not vary it, or its value has no
    /// scaled form.
    fn param_error(&self, param: &str) -> String {
        let params = &self.sut.params;
        if params.is_empty() {
            return format!(
                "{{{PARAM}{param}}} is a parameter of `faultline sweep` (`--vary NAME=V1,V2`), which `run` and \
                 `prove` do not give"
            );
        }
        let (name, unit) = match params.contains_key(param) {
            true => (param, None),
            false => match param.rsplit_once('.') {
                Some((name, unit)) if params.contains_key(name) => (name, Some(unit)),
                _ => (param, None),
            },
        };
        match (params.get(name), unit) {
            (Some(value), Some("ms" | "secs" | "dur")) => format!(
                "{{{PARAM}{param}}} scales a duration, and {name}={value} is not one (e.g. 250ms)"
            ),
            (Some(_), Some(unit)) => format!(
                "{{{PARAM}{name}.{unit}}}: a parameter's forms are {{{PARAM}{name}}}, and for a duration .ms, .secs \
                 and .dur"
            ),
            _ => format!(
                "{{{PARAM}{param}}} names no parameter of this sweep; --vary gives {}",
                params.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// Hosts that are loopback or allowed.
    fn check_hosts(&self, at: &At<'_>, errors: &mut Vec<ScenarioError>, text: &str, file: &str) {
        let sut = &self.sut;
        let mut urls: Vec<(&str, String)> = Vec::new();
        if let Some(u) = &sut.url {
            // `{faultd.url}` is the run's own faultd, always allowed: the load then goes straight to it.
            urls.push((
                "sut.url",
                u.replace("{sut.port}", "1")
                    .replace("{faultd.url}", "http://127.0.0.1:1"),
            ));
        }
        if let (Some(_), Some((name, _))) = (&self.faultd, self.dependency.tcp_routes().next()) {
            errors.push(at(
                &format!("dependency.routes.{name}.tcp"),
                "tcp:",
                "TCP routes need the embedded faultd for now; leave out `faultd:` (an external faultd takes TCP routes through its Toxiproxy API)".into(),
            ));
        }
        if let (Some(_), Some(_)) = (&self.faultd, &self.dependency.dns) {
            errors.push(at(
                "dependency.dns",
                "dns:",
                "a resolver needs the embedded faultd; leave out `faultd:` (a faultd started elsewhere is given its `dns:` section in its own configuration)".into(),
            ));
        }
        if let Some(f) = &self.faultd {
            kept(errors, self.check_replicas(f, text, file));
            if let Some(c) = &f.control {
                urls.push(("faultd.control", c.clone()));
            }
            urls.push(("faultd.url", f.url.clone()));
        }
        for (name, b) in &self.breakers {
            if let Some(u) = b.metrics.as_ref().and_then(|m| m.url.clone()) {
                urls.push((
                    if name.is_empty() {
                        "breakers"
                    } else {
                        "breakers.metrics.url"
                    },
                    u,
                ));
            }
        }
        if let Some(p) = self.dependency.unmatched.as_ref().and_then(|u| u.proxy()) {
            urls.push(("dependency.unmatched.proxy", p.url().to_string()));
        }
        for (field, url) in urls {
            kept(
                errors,
                check_host(&url, &self.allow_hosts).map_err(|m| at(field, &url, m)),
            );
        }
    }

    /// A service started before the run learns no port the run picks: faultd must be where it calls.
    fn check_running_service(&self, at: &At<'_>, errors: &mut Vec<ScenarioError>) {
        let sut = &self.sut;
        // A service started before the run learns no port the run picks: faultd must be where it calls. A
        // dependency that only stands by (no phase changes it, nothing watches or judges it) is left alone: the
        // scenario drives a service that calls nothing.
        let dependency_matters = self.dependency.phases.iter().any(|p| !p.routes.is_empty())
            || !self.breakers.is_empty()
            || self.expect.iter().any(|e| e.value.dependency.is_some());
        // A URL that holds `{faultd.` is rendered with the run's own faultd: the load goes straight to it.
        let through_faultd = sut.url.as_deref().is_some_and(|u| u.contains("{faultd."));
        if sut.url.is_some()
            && !through_faultd
            && sut.demo.is_none()
            && sut.command.is_none()
            && self.faultd.is_none()
            && self.dependency.listen.is_none()
            && dependency_matters
        {
            errors.push(at(
                "sut.url",
                "url:",
                "a service that is already running cannot learn the port of the faultd this run starts: \
                 set `dependency.listen` to the address the service calls (e.g. 127.0.0.1:9000), or run \
                 faultd separately and name it in `faultd: { control, url }`"
                    .into(),
            ));
        }
    }

    /// Each breaker's observation and each expectation, their names resolved against the scenario's phases,
    /// breakers and routes.
    fn resolve_names(
        &self,
        at: &At<'_>,
        errors: &mut Vec<ScenarioError>,
        file: &str,
    ) -> (BTreeMap<String, Vec<Observation>>, Vec<Expectation>) {
        let phases: Vec<String> = self
            .dependency
            .phase_names()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        let routes: Vec<String> = self.dependency.routes.keys().cloned().collect();
        let breaker_names: Vec<String> = self.breakers.keys().cloned().collect();
        let mut observations = BTreeMap::new();
        for (name, spec) in &self.breakers {
            let obs = resolve_breaker(name, spec, &self.sut, &routes)
                .map_err(|m| at(&format!("breakers.{name}"), &format!("{name}:"), m));
            if let Some(obs) = kept(errors, obs) {
                observations.insert(name.clone(), obs);
            }
        }
        let breaker_routes = |b: &str| -> Option<String> {
            let spec = self.breakers.get(b)?;
            spec.route
                .clone()
                .or_else(|| routes.contains(&b.to_string()).then(|| b.to_string()))
        };
        let mut pages: Vec<String> = observations
            .values()
            .flatten()
            .filter_map(|o| match o {
                Observation::Metrics { url_or_path, .. } => Some(url_or_path.clone()),
                _ => None,
            })
            .collect();
        pages.sort();
        pages.dedup();
        let instances = |route: &str| -> u32 {
            self.dependency
                .routes
                .get(route)
                .and_then(|r| r.instances)
                .unwrap_or(0)
        };
        let dns_names: Vec<String> = self
            .dependency
            .dns
            .iter()
            .flat_map(|d| d.names.keys().cloned())
            .collect();
        let names = Names {
            dns_names: &dns_names,
            instances: &instances,
            metrics: &pages,
            phases: &phases,
            breakers: &breaker_names,
            routes: &routes,
            breaker_routes: &breaker_routes,
            tls: self.dependency.tls.is_some(),
        };
        let mut expectations = Vec::new();
        for (i, spec) in self.expect.iter().enumerate() {
            let e = spec
                .value
                .resolve(&names)
                .map_err(|message| ScenarioError::Invalid {
                    file: file.to_string(),
                    line: spec.referenced.line(),
                    column: spec.referenced.column(),
                    field: format!("expect[{i}]"),
                    message,
                });
            if let Some(e) = kept(errors, e) {
                expectations.push(e);
            }
        }
        (observations, expectations)
    }

    /// Expectation ids used once, and a proof that names them and has the demo to switch.
    fn check_ids_and_proof(&self, at: &At<'_>, errors: &mut Vec<ScenarioError>, file: &str) {
        let mut ids: Vec<&str> = Vec::new();
        for (i, spec) in self.expect.iter().enumerate() {
            if let Some(id) = &spec.value.id {
                if ids.contains(&id.as_str()) {
                    errors.push(ScenarioError::Invalid {
                        file: file.to_string(),
                        line: spec.referenced.line(),
                        column: spec.referenced.column(),
                        field: format!("expect[{i}].id"),
                        message: format!("the id `{id}` is used twice"),
                    });
                }
                ids.push(id);
            }
        }
        if let Some(proof) = &self.proof {
            if self.sut.demo.is_none() {
                errors.push(at(
                    "proof",
                    "proof:",
                    "a proof switches the demo's mistakes, so it needs `sut: { demo: ... }`".into(),
                ));
            }
            if proof.fails.is_empty() {
                errors.push(at(
                    "proof.fails",
                    "fails:",
                    "name at least one expectation id the mistake must fail".into(),
                ));
            }
            for f in &proof.fails {
                if !ids.contains(&f.as_str()) {
                    errors.push(at(
                        "proof.fails",
                        "fails:",
                        format!(
                            "`{f}` is not the id of an expectation (ids: {})",
                            if ids.is_empty() {
                                "none".to_string()
                            } else {
                                ids.join(", ")
                            }
                        ),
                    ));
                }
            }
        }
    }
}

impl Scenario {
    /// An external faultd names its control API once: `control` for one faultd, or `replicas` for several, each
    /// a distinct loopback (or allowed) URL, since a replica named twice would count its calls twice.
    fn check_replicas(
        &self,
        f: &ExternalFaultd,
        text: &str,
        file: &str,
    ) -> Result<(), ScenarioError> {
        let at =
            |field: &str, needle: &str, message: String| locate(text, file, field, needle, message);
        match (&f.control, f.replicas.is_empty()) {
            (Some(_), false) => return Err(at("faultd.replicas", "replicas:", "give `control` (one faultd) or `replicas` (several behind `url`), not both".into())),
            (None, true) => return Err(at("faultd", "faultd:", "name the control API: `control: URL` for one faultd, or `replicas: [URL, ...]` for several behind `url`".into())),
            _ => {}
        }
        for (i, url) in f.replicas.iter().enumerate() {
            let earlier = f.replicas[..i].iter().filter(|u| *u == url).count();
            let item = |message: String| locate_item(text, file, "faultd.replicas", i, message);
            if earlier > 0 {
                return Err(item(format!(
                    "{url} is named twice: its recording would count twice"
                )));
            }
            check_host(url, &self.allow_hosts).map_err(item)?;
        }
        Ok(())
    }
}

/// The value of `r`, or `None` with its error kept in `errors`.
fn kept<T>(errors: &mut Vec<ScenarioError>, r: Result<T, ScenarioError>) -> Option<T> {
    r.map_err(|e| errors.push(e)).ok()
}

fn resolve_breaker(
    name: &str,
    spec: &BreakerSpec,
    sut: &SutSpec,
    routes: &[String],
) -> Result<Vec<Observation>, String> {
    if let Some(r) = &spec.route {
        if !routes.contains(r) {
            return Err(format!(
                "`route` names `{r}`, which is not under `dependency.routes` (routes: {})",
                routes.join(", ")
            ));
        }
    }
    let sources = [
        spec.metrics.is_some(),
        spec.webhook.is_some(),
        spec.log.is_some(),
        spec.inferred == Some(true),
    ];
    if !sources.iter().any(|s| *s) {
        return Err(
            "choose at least one source: `metrics`, `webhook`, `log` or `inferred: true`".into(),
        );
    }
    let mut observations = Vec::new();
    if let Some(m) = &spec.metrics {
        let mapping = match (m.preset, &m.metric) {
            (Some(p), None) => StateMapping::preset(p, name, &m.labels),
            (None, Some(metric)) => {
                let encoding = match (&m.state_label, m.values.is_empty()) {
                    (Some(label), true) => Encoding::StateLabel(label.clone()),
                    (None, false) => {
                        let mut values = Vec::new();
                        for (state, v) in &m.values {
                            let s = BreakerState::parse(state).ok_or_else(|| format!("`values` has {state:?}; expected closed, open, half_open"))?;
                            values.push((*v, s));
                        }
                        Encoding::Gauge(values)
                    }
                    _ => return Err("a custom metric needs either `values` (a gauge) or `state_label` (one series per state)".into()),
                };
                StateMapping {
                    metric: metric.clone(),
                    labels: m.labels.clone(),
                    encoding,
                }
            }
            (Some(_), Some(_)) => return Err("give `preset` or `metric`, not both".into()),
            (None, None) => StateMapping::preset(Preset::Seed, name, &m.labels),
        };
        let url_or_path = m
            .url
            .clone()
            .unwrap_or_else(|| m.path.clone().unwrap_or_else(|| "/metrics".into()));
        observations.push(Observation::Metrics {
            url_or_path,
            mapping,
            interval: m.interval.unwrap_or(Dur::from_millis(100)),
        });
    }
    if let Some(w) = &spec.webhook {
        observations.push(Observation::Webhook {
            name: w.name.clone().unwrap_or_else(|| name.to_string()),
        });
    }
    if let Some(l) = &spec.log {
        if sut.command.is_none() {
            return Err("`log` observes a SUT's output, so it needs a `command` SUT".into());
        }
        let pattern = regex::Regex::new(&l.pattern)
            .map_err(|e| format!("`log.pattern` is not a valid regex: {e}"))?;
        if !pattern.capture_names().any(|n| n == Some("state")) {
            return Err(
                "`log.pattern` needs a named group `state`, e.g. (?P<state>open|closed|half_open)"
                    .into(),
            );
        }
        observations.push(Observation::Log { pattern });
    }
    if spec.inferred == Some(true) {
        let has_route = spec.route.is_some() || routes.contains(&name.to_string());
        if !has_route {
            return Err(
                "`inferred` needs the dependency route the breaker guards: add `route:`".into(),
            );
        }
        observations.push(Observation::Inferred);
    }
    Ok(observations)
}
