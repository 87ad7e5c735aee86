//! faultd processes started elsewhere, driven through their control APIs: one faultd (`faultd.control`), or several
//! replicas that serve one dependency behind one address (`faultd.replicas`, a Kubernetes Service or a load
//! balancer in front of them). Every replica gets the same configuration and seed, every schedule is started at
//! once (one request per replica, sent concurrently, each timed on the run's clock), every recording is read and
//! merged into one with `faultd::Recording::merge_replicas`, and every replica is reset at the end.
//!
//! Not for merging (faultd's recorder owns that) nor for the embedded faultd (`dependency`).

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::Method;
use tokio::time::Instant;

use super::RunError;
use crate::scenario::ExternalFaultd;

/// How long one control call may take: a replica that does not answer breaks the run rather than holding it.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);

/// When one replica's schedule started, as the runner saw it: the request was sent at `sent` and answered at
/// `answered`, both from t = 0 on the run's clock (negative: before it). The replica set its own origin in between.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartWindow {
    /// Milliseconds from t = 0 when the start request left.
    pub sent_ms: f64,
    /// Milliseconds from t = 0 when its answer arrived.
    pub answered_ms: f64,
}

/// One replica at the end of a run: its control API, when its schedule started, and what it recorded alone.
#[derive(Debug, Clone)]
pub struct ReplicaRecording {
    /// The replica's control API, as the scenario names it.
    pub control: String,
    /// When its schedule started, if it was started.
    pub start: Option<StartWindow>,
    /// Its own recording, before the merge.
    pub recording: faultd::Recording,
}

/// One or more external faultd replicas behind one address.
pub struct Replicas {
    spec: ExternalFaultd,
    client: reqwest::Client,
    starts: Mutex<Vec<Option<StartWindow>>>,
}

impl Replicas {
    /// Pushes `config` to every replica (concurrently); the first that cannot be reached or refuses it is the
    /// error, naming it.
    pub async fn configure(
        spec: &ExternalFaultd,
        config: &faultd::Config,
    ) -> Result<Replicas, RunError> {
        let first = spec
            .controls()
            .first()
            .map(|c| c.to_string())
            .unwrap_or_default();
        let client = crate::http::client_builder()
            .timeout(CONTROL_TIMEOUT)
            .build()
            .map_err(|e| RunError::ExternalFaultd {
                url: first.clone(),
                message: e.to_string(),
            })?;
        let body = serde_json::to_value(config).map_err(|e| RunError::ExternalFaultd {
            url: first,
            message: e.to_string(),
        })?;
        let replicas = Replicas {
            spec: spec.clone(),
            client,
            starts: Mutex::new(vec![None; spec.controls().len()]),
        };
        replicas
            .each(|r, control| {
                let body = body.clone();
                async move {
                    r.call(Method::PUT, &control, "/config", Some(body))
                        .await
                        .map(|_| ())
                }
            })
            .await?;
        Ok(replicas)
    }

    /// The address the SUT calls.
    pub fn url(&self) -> &str {
        self.spec.url.trim_end_matches('/')
    }

    /// Starts every replica's schedule at `origin` (t = 0 on the run's clock): a faultd sets its own origin when the
    /// request reaches it, so one request per replica is sent at `origin`, all together, and each is timed, so that
    /// the replicas' origins lie within a round trip of t = 0 and of each other.
    pub async fn start_schedule(&self, origin: Instant) -> Result<(), RunError> {
        let ms = |at: Instant| {
            if at >= origin {
                at.duration_since(origin).as_secs_f64() * 1e3
            } else {
                -(origin.duration_since(at).as_secs_f64() * 1e3)
            }
        };
        let windows = self
            .each(|r, control| async move {
                tokio::time::sleep_until(origin).await;
                let sent = Instant::now();
                r.call(Method::POST, &control, "/schedule/start", None)
                    .await?;
                Ok((sent, Instant::now()))
            })
            .await?;
        let mut starts = self.starts.lock().unwrap_or_else(|p| p.into_inner());
        *starts = windows
            .into_iter()
            .map(|(sent, answered)| {
                Some(StartWindow {
                    sent_ms: ms(sent),
                    answered_ms: ms(answered),
                })
            })
            .collect();
        Ok(())
    }

    /// Every replica's recording, read concurrently, TCP routes as calls, every series from bucket `from` on.
    pub async fn recordings(&self, from: usize) -> Result<Vec<faultd::Recording>, RunError> {
        let path = if from > 0 {
            format!("/recording?since={from}")
        } else {
            "/recording".to_string()
        };
        self.each(|r, control| {
            let path = path.clone();
            async move {
                let failed = |message: String| RunError::ExternalFaultd {
                    url: control.clone(),
                    message: format!("cannot read its recording: {message}"),
                };
                let json: serde_json::Value = r
                    .call(Method::GET, &control, &path, None)
                    .await?
                    .json()
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                faultd::control::recording_from_json(json).map_err(|e| failed(e.to_string()))
            }
        })
        .await
    }

    /// Every replica's calls recorded one by one (`GET /recording/calls`), together.
    pub async fn traced_calls(&self) -> Result<Vec<faultd::recorder::TracedCall>, RunError> {
        let each = self
            .each(|r, control| async move {
                let failed = |message: String| RunError::ExternalFaultd {
                    url: control.clone(),
                    message: format!("cannot read its calls: {message}"),
                };
                r.call(Method::GET, &control, "/recording/calls", None)
                    .await?
                    .json::<Vec<faultd::recorder::TracedCall>>()
                    .await
                    .map_err(|e| failed(e.to_string()))
            })
            .await?;
        Ok(each.into_iter().flatten().collect())
    }

    /// The replicas' recordings merged into one (one replica's comes back as it is, exact), every series from
    /// bucket `from` on.
    pub async fn recording_since(&self, from: usize) -> Result<faultd::Recording, RunError> {
        let all = self.recordings(from).await?;
        self.merge(&all)
    }

    /// The merged recording and, beside it, each replica's own with its start.
    pub async fn recording_per_replica(
        &self,
    ) -> Result<(faultd::Recording, Vec<ReplicaRecording>), RunError> {
        let all = self.recordings(0).await?;
        let merged = self.merge(&all)?;
        let starts = self
            .starts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let each = self
            .spec
            .controls()
            .into_iter()
            .zip(all)
            .zip(starts)
            .map(|((control, recording), start)| ReplicaRecording {
                control: control.to_string(),
                start,
                recording,
            })
            .collect();
        Ok((merged, each))
    }

    fn merge(&self, all: &[faultd::Recording]) -> Result<faultd::Recording, RunError> {
        faultd::Recording::merge_replicas(all).map_err(|e| {
            let replica = match &e {
                faultd::MergeError::Buckets { replica, .. }
                | faultd::MergeError::Phases { replica, .. } => *replica,
                _ => 0,
            };
            RunError::ExternalFaultd {
                url: self
                    .spec
                    .controls()
                    .get(replica)
                    .map(|c| c.to_string())
                    .unwrap_or_default(),
                message: format!("cannot merge the replicas' recordings: {e}"),
            }
        })
    }

    /// Returns every replica to its base behaviour (failures are ignored: the run is over either way).
    pub async fn reset(&self) {
        let _ = self
            .each(|r, control| async move {
                r.call(Method::POST, &control, "/schedule/reset", None)
                    .await
                    .map(|_| ())
            })
            .await;
    }

    /// Runs `call` on every replica at once (one task each) and collects the answers in the replicas' order; the
    /// first error, in that order, wins.
    async fn each<T, F, Fut>(&self, call: F) -> Result<Vec<T>, RunError>
    where
        F: Fn(Control, String) -> Fut,
        Fut: Future<Output = Result<T, RunError>> + Send + 'static,
        T: Send + 'static,
    {
        let control = Control {
            client: self.client.clone(),
            token: self.spec.token.clone(),
        };
        let tasks: Vec<(String, tokio::task::JoinHandle<Result<T, RunError>>)> = self
            .spec
            .controls()
            .into_iter()
            .map(|c| {
                (
                    c.to_string(),
                    tokio::spawn(call(control.clone(), c.to_string())),
                )
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        for (url, task) in tasks {
            let answer = task.await.map_err(|e| RunError::ExternalFaultd {
                url,
                message: e.to_string(),
            })?;
            out.push(answer?);
        }
        Ok(out)
    }
}

/// A control API client: the shared HTTP client and the bearer token.
#[derive(Clone)]
struct Control {
    client: reqwest::Client,
    token: Option<String>,
}

impl Control {
    /// `method path` on the replica at `control`, with `body` as JSON; an answer other than 2xx is the error.
    async fn call(
        &self,
        method: Method,
        control: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<reqwest::Response, RunError> {
        let url = format!("{}{path}", control.trim_end_matches('/'));
        let mut req = self.client.request(method, &url);
        if let Some(b) = body {
            req = req.json(&b);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| RunError::ExternalFaultd {
            url: url.clone(),
            message: e.to_string(),
        })?;
        if !resp.status().is_success() {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            return Err(RunError::ExternalFaultd {
                url,
                message: format!("{status}: {text}"),
            });
        }
        Ok(resp)
    }
}
