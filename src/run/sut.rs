//! The service under test, whichever kind the scenario names: the bundled demo (in-process, on a loopback port), a
//! command the runner starts and waits for (placeholders rendered, output captured, readiness probed as the scenario
//! says: `ready`), or the URL of a service already running. Each ends up as a base URL for the load and, where the
//! runner owns it, something to stop.
//!
//! Not for the process handling of a command SUT (`child`) nor for observing its breakers (`crate::breaker`).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::mpsc;

pub use super::child::{ChildSut, SutError};
use super::dependency::Dependency;
use super::ready::Probe;
use super::signals::Signals;
use super::{loopback, RunError};
use crate::output::OutputLine;
use crate::scenario::{Placeholders, Scenario};

/// A started SUT.
pub struct Sut {
    /// Its base URL, without a trailing slash.
    pub url: String,
    kind: Kind,
}

enum Kind {
    Demo(demo::Demo),
    Command(ChildSut),
    External,
}

/// What starting the SUT came to.
pub enum Started {
    Ready(Sut),
    /// A signal arrived while a command SUT was starting: it is running, but the run ends at once.
    Interrupted(Sut, &'static str),
}

impl Sut {
    /// Starts the SUT of `scenario` against `dependency`. A command SUT's output lines go to `lines`; a signal while
    /// it starts ends the wait.
    pub async fn start(
        scenario: &Scenario,
        dependency: &Dependency,
        webhook_url: &str,
        seed: u64,
        lines: mpsc::UnboundedSender<OutputLine>,
        signals: &mut Signals,
    ) -> Result<Started, RunError> {
        // Durations in placeholders follow the time scale the scenario was loaded with, as its own durations do.
        let scale = scenario.sut.time_scale.unwrap_or(1.0);
        if let Some(cfg) = &scenario.sut.demo {
            // A Redis or PostgreSQL operation reaches its server through a TCP route:
            // `redis: "{faultd.routes.db.addr}"`, `postgres: "{faultd.routes.db.addr}"`.
            let mut cfg = cfg.clone();
            let p = Placeholders {
                values: dependency.placeholders(),
                scale,
            };
            cfg.redis = cfg.redis.map(|r| p.render(&r));
            // The dependency's name resolved through faultd's resolver: `dns: { resolver: "{faultd.dns}" }`.
            if let Some(d) = cfg.dns.as_mut() {
                d.resolver = p.render(&d.resolver);
            }
            cfg.postgres = cfg.postgres.map(|r| p.render(&r));
            // A dependency of several instances: `endpoints: "{faultd.routes.pricing.instances}"`.
            for op in demo::operation::Operation::ALL {
                if let Some(c) = cfg.operations.get_mut(op) {
                    c.endpoints = (c.endpoints.iter())
                        .flat_map(|u| {
                            p.render(u)
                                .split(',')
                                .map(str::to_string)
                                .collect::<Vec<_>>()
                        })
                        .map(|u| u.trim().to_string())
                        .filter(|u| !u.is_empty())
                        .collect();
                }
            }
            let d = demo::start(
                cfg,
                demo::Options {
                    listen: loopback(0),
                    dependency_url: dependency.url(),
                    // An embedded faultd's minted CA: the demo trusts it and nothing else.
                    dependency_ca: dependency.ca_pem(),
                    webhook: Some(webhook_url.to_string()),
                },
            )
            .await
            .map_err(|e| RunError::Demo(e.to_string()))?;
            return Ok(Started::Ready(Sut {
                url: format!("http://{}", d.addr()),
                kind: Kind::Demo(d),
            }));
        }
        let port =
            free_port().map_err(|e| RunError::Demo(format!("cannot pick a free port: {e}")))?;
        let mut values: BTreeMap<String, String> = dependency.placeholders();
        values.insert("sut.port".into(), port.to_string());
        values.insert("webhook.url".into(), webhook_url.to_string());
        values.insert("seed".into(), seed.to_string());
        values.extend(Placeholders::params(&scenario.sut.params, scale));
        let mut p = Placeholders { values, scale };
        let url = p
            .render(scenario.sut.url.as_deref().unwrap_or_default())
            .trim_end_matches('/')
            .to_string();
        p.values.insert("sut.url".into(), url.clone());
        let Some(argv) = &scenario.sut.command else {
            return Ok(Started::Ready(Sut {
                url,
                kind: Kind::External,
            }));
        };
        let argv: Vec<String> = argv.iter().map(|a| p.render(a)).collect();
        let env: Vec<(String, String)> = scenario
            .sut
            .env
            .iter()
            .map(|(k, val)| (k.clone(), p.render(val)))
            .collect();
        let readiness = scenario.sut.ready.clone().unwrap_or_default();
        let probe = Probe::new(&readiness, &url).map_err(SutError::Unprobeable)?;
        let mut c = ChildSut::start(&argv, &env, lines, probe.output_watch())?;
        let timeout = scenario
            .sut
            .ready_timeout
            .map(|d| d.get())
            .unwrap_or(Duration::from_secs(30));
        let readiness = tokio::select! {
            r = c.wait_ready(&probe, timeout) => r.map(|()| None),
            name = signals.recv() => Ok(Some(name)),
        };
        let sut = |c| Sut {
            url: url.clone(),
            kind: Kind::Command(c),
        };
        match readiness {
            Ok(None) => Ok(Started::Ready(sut(c))),
            Ok(Some(signal)) => Ok(Started::Interrupted(sut(c), signal)),
            Err(e) => {
                c.stop(Duration::from_secs(2)).await;
                Err(e.into())
            }
        }
    }

    /// `Some(status)` if a command SUT has exited.
    pub fn exited(&mut self) -> Option<String> {
        match &mut self.kind {
            Kind::Command(c) => c.exited(),
            _ => None,
        }
    }

    /// The last lines a command SUT printed.
    pub fn last_lines(&self) -> String {
        match &self.kind {
            Kind::Command(c) => c.last_lines(),
            _ => String::new(),
        }
    }

    /// Stops what the runner started: the demo, or the command's whole process group.
    pub async fn stop(self) {
        match self.kind {
            Kind::Demo(d) => d.shutdown().await,
            Kind::Command(c) => c.stop(Duration::from_secs(3)).await,
            Kind::External => {}
        }
    }
}

/// The port a command SUT is handed as `{sut.port}`: it binds it later, so the port comes from outside the range
/// the run's own connections draw from (`faultline_units::port`).
fn free_port() -> std::io::Result<u16> {
    faultline_units::port::handed_out()
}
