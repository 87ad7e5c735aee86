//! The run's dependency: an embedded faultd (started in-process on loopback ports), or external faultd processes
//! driven through their control APIs (one, or several replicas behind one address: `replicas`). Either way the
//! runner configures it, starts its schedule at t = 0, reads its recording, and returns it to healthy at the end.
//!
//! Not for faults or recording themselves: faultd owns those, and this room only talks to its public API.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use super::replicas::{ReplicaRecording, Replicas};
use super::{loopback, RunError};
use crate::scenario::{Placeholders, Scenario};

/// The dependency of a run.
pub enum Dependency {
    /// faultd in this process, with the run's CA file when it terminates TLS.
    Embedded(faultd::Faultd, Option<RunCa>),
    /// One faultd or several replicas started elsewhere.
    External(Replicas),
}

/// The run's CA certificate as a file a command SUT can be pointed at (`{faultd.ca}`), in a folder of its own
/// under the system's temporary directory, removed with it. It is never added to any trust store: a SUT trusts it
/// only where it is told to.
pub struct RunCa {
    dir: PathBuf,
}

impl RunCa {
    fn new() -> Result<RunCa, RunError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("faultline-ca-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| {
            RunError::Faultd(format!(
                "cannot create {} for the run's CA: {e}",
                dir.display()
            ))
        })?;
        Ok(RunCa { dir })
    }

    /// The CA file (PEM).
    pub fn path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
}

impl Drop for RunCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Dependency {
    /// Starts (or configures) the dependency of `scenario` with the run's seed and bucket width, recording each
    /// call one by one when the run follows its requests (`correlate`).
    pub async fn start(
        scenario: &Scenario,
        seed: u64,
        bucket: Duration,
        correlate: Option<faultline_units::trace::Correlate>,
    ) -> Result<Dependency, RunError> {
        let mut config = scenario.dependency.clone();
        config.seed = Some(config.seed.unwrap_or(seed));
        config.bucket = Some(faultline_units::Dur(bucket));
        if correlate.is_some() {
            config.correlate = correlate;
        }
        match &scenario.faultd {
            None => {
                let ca = match &config.tls {
                    Some(tls) if tls.mints_ca() => Some(RunCa::new()?),
                    _ => None,
                };
                let f = faultd::start(
                    config,
                    faultd::Options {
                        listen: loopback(0),
                        control: Some(loopback(0)),
                        ca_out: ca.as_ref().map(RunCa::path),
                        ..Default::default()
                    },
                )
                .await
                .map_err(|e| RunError::Faultd(e.to_string()))?;
                Ok(Dependency::Embedded(f, ca))
            }
            // The replicas read no files the runner names (another machine's, a control API): bytes go inline.
            Some(ext) => Ok(Dependency::External(
                Replicas::configure(ext, &config.inlined()).await?,
            )),
        }
    }

    /// The base URL the SUT calls: `https://` when the embedded faultd terminates TLS.
    pub fn url(&self) -> String {
        match self {
            Dependency::Embedded(f, _) if f.config().tls.is_some() => {
                format!("https://{}", f.data_addr())
            }
            Dependency::Embedded(f, _) => format!("http://{}", f.data_addr()),
            Dependency::External(ext) => ext.url().to_string(),
        }
    }

    /// The placeholders a command SUT may use to reach the dependency: `faultd.url`, and for an embedded faultd
    /// `faultd.host`, `faultd.port`, `faultd.control`, `faultd.ca` under TLS, `faultd.dns` with a resolver, and per
    /// TCP route `faultd.routes.NAME.host`, `.port`, `.addr`, and per route served by instances
    /// `faultd.routes.NAME.instances` and `faultd.routes.NAME.instance.N.addr` (`.host`, `.port`, and `.url` on
    /// an HTTP route).
    pub fn placeholders(&self) -> BTreeMap<String, String> {
        let mut values = BTreeMap::from([("faultd.url".to_string(), self.url())]);
        if let Dependency::Embedded(f, ca) = self {
            if let Some(ca) = ca {
                values.insert(
                    Placeholders::CA.into(),
                    ca.path().to_string_lossy().into_owned(),
                );
            }
            let a: SocketAddr = f.data_addr();
            values.insert("faultd.host".into(), a.ip().to_string());
            values.insert("faultd.port".into(), a.port().to_string());
            if let Some(c) = f.control_addr() {
                values.insert("faultd.control".into(), format!("http://{c}"));
            }
            if let Some(d) = f.dns_addr() {
                values.insert(Placeholders::DNS.into(), d.to_string());
            }
            for (name, route) in &f.config().routes {
                let addrs = f.instance_addrs(name);
                if addrs.is_empty() {
                    continue;
                }
                let urls = (!route.is_tcp()).then(|| f.instance_urls(name));
                values.extend(Placeholders::instance_values(name, addrs, urls.as_deref()));
            }
            for (name, _) in f.config().tcp_routes() {
                if let Some(a) = f.tcp_addr(name) {
                    let key = |p: &str| format!("faultd.routes.{name}.{p}");
                    values.insert(key("host"), a.ip().to_string());
                    values.insert(key("port"), a.port().to_string());
                    values.insert(key("addr"), a.to_string());
                }
            }
        }
        values
    }

    /// The run's CA certificate (PEM), when the embedded faultd terminates TLS with certificates it minted.
    pub fn ca_pem(&self) -> Option<String> {
        match self {
            Dependency::Embedded(f, Some(_)) => f.ca_pem(),
            _ => None,
        }
    }

    /// Starts the schedule with t = 0 at `origin`.
    pub async fn start_schedule(&self, origin: Instant) -> Result<(), RunError> {
        match self {
            Dependency::Embedded(f, _) => {
                f.start_schedule(origin);
                Ok(())
            }
            // An external faultd starts on receipt: the request goes at t = 0.
            Dependency::External(ext) => ext.start_schedule(origin).await,
        }
    }

    /// Calls in flight now, where it can be read without a round trip.
    pub fn in_flight(&self) -> Option<u64> {
        match self {
            Dependency::Embedded(f, _) => Some(f.in_flight()),
            Dependency::External(_) => None,
        }
    }

    /// Calls so far that matched no route, where it can be read without a round trip.
    pub fn unmatched(&self) -> Option<u64> {
        match self {
            Dependency::Embedded(f, _) => Some(f.unmatched()),
            Dependency::External(_) => None,
        }
    }

    /// Returns every route to healthy at once (a run that stops early must not leave the dependency failing).
    pub fn reset_to_healthy(&self) {
        if let Dependency::Embedded(f, _) = self {
            f.reset_to_healthy();
        }
    }

    /// The recording so far (over several replicas, their recordings merged).
    pub async fn recording(&self) -> Result<faultd::Recording, RunError> {
        self.recording_since(0).await
    }

    /// The recording so far with every series from bucket `from` on (`faultd::Faultd::recording_since`, `GET
    /// /recording?since=N`), the run-wide figures whole: what the live record needs once a second.
    pub async fn recording_since(&self, from: usize) -> Result<faultd::Recording, RunError> {
        match self {
            Dependency::Embedded(f, _) => Ok(faultd::tcp::record::with_tcp_routes_since(
                f.recording_since(from),
                f.tcp_recording(),
                from,
            )),
            Dependency::External(ext) => ext.recording_since(from).await,
        }
    }

    /// The recording at the end of the run, and each replica's own beside it when the dependency is more than
    /// one faultd replica (none otherwise).
    pub async fn final_recording(
        &self,
    ) -> Result<(faultd::Recording, Vec<ReplicaRecording>), RunError> {
        match self {
            Dependency::External(ext) => {
                let (merged, each) = ext.recording_per_replica().await?;
                Ok((merged, if each.len() > 1 { each } else { Vec::new() }))
            }
            embedded => Ok((embedded.recording().await?, Vec::new())),
        }
    }

    /// Every call recorded one by one (when the run follows its requests), over every replica.
    pub async fn traced_calls(&self) -> Result<Vec<faultd::recorder::TracedCall>, RunError> {
        match self {
            Dependency::Embedded(f, _) => Ok(f.traced_calls()),
            Dependency::External(ext) => ext.traced_calls().await,
        }
    }

    /// Stops the schedule and returns to healthy; an embedded faultd is shut down.
    pub async fn stop(self) {
        match self {
            Dependency::Embedded(f, _) => {
                f.stop_schedule();
                f.reset_to_healthy();
                f.shutdown().await;
            }
            Dependency::External(ext) => ext.reset().await,
        }
    }
}
