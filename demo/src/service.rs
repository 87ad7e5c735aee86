//! The HTTP side of the demo: the endpoints, the instances they are spread over, and the wiring of one layer stack
//! per (operation, instance) with the breakers shared as the configuration says.
//!
//! Not for resilience logic (that is in `layers` and `breaker`) and not for the listener's lifecycle (that is
//! `lib.rs`): this module builds the router and assembles pages from the answers the stacks give.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use tower::util::BoxCloneSyncService;
use tower::ServiceExt;

use crate::admission::{admit, Admission};
use crate::breaker::{BreakerState, Policy};
use crate::config::{DemoConfig, Mistake, Protocol};
use crate::context::CallContext;
use crate::layers::balance::Balancer;
use crate::layers::breaker::{BreakerCell, BreakerLayer};
use crate::layers::bulkhead::BulkheadLayer;
use crate::layers::client::DependencyClient;
use crate::layers::fallback::FallbackLayer;
use crate::layers::grpc::{GrpcChannel, GrpcClient};
use crate::layers::hedge::{HedgeLayer, HedgePolicy};
use crate::layers::postgres::PostgresClient;
use crate::layers::redis::RedisClient;
use crate::layers::resolve::NameResolver;
use crate::layers::retry::{RetryLayer, RetryPolicy, Spacing};
use crate::layers::timeout::TimeoutLayer;
use crate::layers::{stack, Answer, CallError, DepRequest, OperationStack, Reply};
use crate::observe::{AttemptLabels, BreakerLabels, Journal, Metrics};
use crate::operation::Operation;
use crate::DemoError;

/// One copy of the service: its own stacks (pools, retry budgets, caches) and the breaker guarding each
/// operation (its own unless shared).
pub struct Instance {
    id: usize,
    stacks: Vec<Option<OperationStack>>,
    breakers: Vec<Option<Arc<BreakerCell>>>,
    /// The `no_deadline_propagation` mistake: a call goes on after its caller has left.
    detached: bool,
}

impl Instance {
    /// Calls `op` for item `id` through its stack, on behalf of a caller with `context`; `None` when the
    /// operation is not configured. The call ends when the caller leaves (its future is dropped with the
    /// request's), except with the `no_deadline_propagation` mistake, where it runs in a task of its own to the
    /// end of its own timeouts and retries.
    async fn call(
        &self,
        op: Operation,
        id: &str,
        body: Bytes,
        idempotency_key: Option<String>,
        context: CallContext,
    ) -> Option<Answer> {
        let stack = self.stacks[op.index()].clone()?;
        let req = DepRequest {
            method: op.method(),
            path: op.path(id),
            body,
            key: id.to_string(),
            idempotency_key,
            context,
        };
        let answer = if self.detached {
            tokio::spawn(stack.oneshot(req)).await.ok()?
        } else {
            stack.oneshot(req).await
        };
        match answer {
            Ok(answer) => Some(answer),
            Err(never) => match never {},
        }
    }
}

/// Everything the handlers share.
pub struct App {
    instances: Vec<Instance>,
    admission: Admission,
    next: AtomicUsize,
    journal: Arc<Journal>,
    /// Distinguishes this process's idempotency keys from an earlier run's.
    run_id: u64,
    writes: AtomicU64,
    /// Off with the `no_deadline_propagation` mistake.
    propagate_deadline: bool,
}

impl App {
    /// Builds every instance's stacks and the breakers, as `config` says. Fails only on a Redis or PostgreSQL
    /// address that cannot be used.
    pub fn new(
        config: &DemoConfig,
        client: reqwest::Client,
        dependency_url: &str,
        journal: Arc<Journal>,
    ) -> Result<Self, DemoError> {
        let metrics = journal.metrics().clone();
        let cells = breaker_cells(config, &journal);
        // One gRPC channel for the whole process, as a service keeps one per target.
        let channel = (config.protocol == Protocol::Grpc)
            .then(|| GrpcChannel::new(&authority(dependency_url)));
        let resolver = name_resolver(config, dependency_url)?;
        let instances = (0..config.instances)
            .map(|i| -> Result<Instance, DemoError> {
                let mut stacks = vec![None; Operation::ALL.len()];
                let mut breakers = vec![None; Operation::ALL.len()];
                for (op, c) in config.operations.configured() {
                    let labels = BreakerLabels::new(op, i);
                    let cell = cells[&cell_key(config, op, i)].clone();
                    let timeout = (!config.has(Mistake::NoTimeout)).then(|| c.timeout.get());
                    let attempts = |attempt: &str| AttemptLabels {
                        operation: op.key().into(),
                        instance: i.to_string(),
                        attempt: attempt.into(),
                    };
                    // One family lookup per statement: `get_or_create` returns a read guard, and a second lookup
                    // that must insert while the first guard lives would wait for itself.
                    let first_attempts = metrics.attempts.get_or_create(&attempts("first")).clone();
                    let retry_attempts = metrics.attempts.get_or_create(&attempts("retry")).clone();
                    let retries_denied = metrics
                        .retries_denied
                        .get_or_create(&attempts("retry"))
                        .clone();
                    let retry = RetryPolicy::new(
                        &c.retries,
                        config.has(Mistake::UnbudgetedRetries),
                        first_attempts,
                        retry_attempts,
                        retries_denied,
                    )
                    .reconnecting_at_once(config.has(Mistake::InstantReconnect))
                    .retrying_only_unapplied(
                        op.is_unrepeatable() && !config.has(Mistake::NonIdempotentRetry),
                    )
                    .spaced(spacing(config));
                    let hedges = metrics.attempts.get_or_create(&attempts("hedge")).clone();
                    let hedge = c.hedge.map(|h| {
                        HedgePolicy::new(h, timeout, retry.budget(), hedges)
                            .uncancelled(config.has(Mistake::UncancelledHedges))
                    });
                    // Each Redis or PostgreSQL operation of each instance has its own connection pool, as each has its own
                    // bulkhead; HTTP operations share the client's unbounded pool, gRPC ones the process's channel.
                    let dependency: Client = if op.is_redis() {
                        let addr = config.redis.as_deref().unwrap_or_default();
                        let redis = RedisClient::new(addr, c.pool, op).map_err(|message| {
                            DemoError::Invalid {
                                field: "redis".into(),
                                message,
                            }
                        })?;
                        Client::new(redis)
                    } else if op.is_postgres() {
                        let addr = config.postgres.as_deref().unwrap_or_default();
                        let retry = !config.has(Mistake::NoTransactionRetry);
                        let postgres =
                            PostgresClient::new(addr, c.pool, retry).map_err(|message| {
                                DemoError::Invalid {
                                    field: "postgres".into(),
                                    message,
                                }
                            })?;
                        Client::new(postgres)
                    } else {
                        match &channel {
                            Some(channel) => Client::new(GrpcClient::new(channel.clone(), op)),
                            None if c.endpoints.is_empty() => Client::new(
                                DependencyClient::new(client.clone(), dependency_url)
                                    .resolving(resolver.clone()),
                            ),
                            // Several endpoints: round robin, with outlier ejection unless it is the mistake.
                            None => Client::new(Balancer::new(
                                endpoints(op, &c.endpoints, &client)?,
                                (!config.has(Mistake::NoOutlierEjection))
                                    .then(|| c.outlier.clone()),
                            )),
                        }
                    };
                    stacks[op.index()] = Some(stack(
                        dependency,
                        TimeoutLayer::new(timeout),
                        BulkheadLayer::new(
                            c.pool,
                            metrics.in_flight.get_or_create(&labels).clone(),
                        ),
                        RetryLayer::new(retry),
                        HedgeLayer::new(hedge),
                        BreakerLayer::new(cell.clone(), labels),
                        FallbackLayer::new(op, c.fallback.clone(), metrics.clone(), i),
                    ));
                    breakers[op.index()] = Some(cell);
                }
                Ok(Instance {
                    id: i,
                    stacks,
                    breakers,
                    detached: config.has(Mistake::NoDeadlinePropagation),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(App {
            admission: Admission::new(
                &config.admission,
                config.instances,
                config.has(Mistake::UnboundedQueue),
                metrics.admission.clone(),
            ),
            propagate_deadline: !config.has(Mistake::NoDeadlinePropagation),
            instances,
            next: AtomicUsize::new(0),
            journal,
            run_id: rand::random::<u32>() as u64,
            writes: AtomicU64::new(0),
        })
    }

    /// The next instance, round-robin.
    fn pick(&self) -> &Instance {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        &self.instances[n % self.instances.len()]
    }

    /// The state of the breaker guarding `op` on `instance`, if both exist.
    pub fn breaker_state(&self, op: Operation, instance: usize) -> Option<BreakerState> {
        self.instances.get(instance)?.breakers[op.index()]
            .as_ref()
            .map(|c| c.state())
    }

    /// The metrics, for `/metrics` and tests.
    pub fn metrics(&self) -> &Arc<Metrics> {
        self.journal.metrics()
    }

    /// The context of a request that arrives now with `headers`.
    fn context(&self, headers: &HeaderMap) -> CallContext {
        CallContext::from_headers(
            headers,
            tokio::time::Instant::now(),
            self.propagate_deadline,
        )
    }

    fn idempotency_key(&self, instance: &Instance) -> String {
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        format!("demo-{:08x}-{}-{n}", self.run_id, instance.id)
    }
}

/// When retries are sent: the `no_backoff` mistake wins over `no_jitter` when both are on.
fn spacing(config: &DemoConfig) -> Spacing {
    if config.has(Mistake::NoBackoff) {
        Spacing::Immediate
    } else if config.has(Mistake::NoJitter) {
        Spacing::Lockstep
    } else {
        Spacing::Jittered
    }
}

/// The innermost service of a stack, whichever protocol it speaks: HTTP, gRPC, Redis or PostgreSQL.
type Client = BoxCloneSyncService<DepRequest, Reply, CallError>;

/// The resolver of the dependency's name, one for the whole process as a host has one cache (`dns:`).
fn name_resolver(
    config: &DemoConfig,
    dependency_url: &str,
) -> Result<Option<Arc<NameResolver>>, DemoError> {
    let Some(dns) = &config.dns else {
        return Ok(None);
    };
    // Checked here rather than with the configuration: a scenario writes the resolver as `{faultd.dns}`, an
    // address only once faultd listens.
    let invalid = |message: String| DemoError::Invalid {
        field: "dns".into(),
        message,
    };
    let url = reqwest::Url::parse(dependency_url).map_err(|e| invalid(e.to_string()))?;
    if url.scheme() != "http" {
        return Err(invalid(format!(
            "{dependency_url}: the name is resolved for http:// dependencies only (over TLS the certificate would be checked against the address)"
        )));
    }
    let name = match (&dns.name, url.host_str()) {
        (Some(n), _) => n.clone(),
        (None, Some(h)) => h.to_string(),
        (None, None) => return Err(invalid(format!("{dependency_url} has no host to resolve"))),
    };
    let uncached = config.has(Mistake::NoDnsCache);
    NameResolver::new(dns, &name, uncached)
        .map(|r| Some(Arc::new(r)))
        .map_err(invalid)
}

/// One client per endpoint of `op`, each a base URL (checked here: a scenario writes them as placeholders).
fn endpoints(
    op: Operation,
    urls: &[String],
    client: &reqwest::Client,
) -> Result<Vec<DependencyClient>, DemoError> {
    urls.iter()
        .map(|url| match reqwest::Url::parse(url) {
            Ok(u) if u.scheme().starts_with("http") => {
                Ok(DependencyClient::new(client.clone(), url))
            }
            _ => Err(DemoError::Invalid {
                field: format!("operations.{}.endpoints", op.key()),
                message: format!("{url:?} is not a base URL such as http://127.0.0.1:9001"),
            }),
        })
        .collect()
}

/// `host:port` of an http:// URL (validated before the service is built), port 80 when it has none.
fn authority(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!(
            "{}:{}",
            u.host_str().unwrap_or("127.0.0.1"),
            u.port_or_known_default().unwrap_or(80)
        ),
        Err(_) => url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string(),
    }
}

/// Which breaker guards `op` on instance `i`: one per pair by default; one per operation for all instances with
/// `shared_counters`; one per instance for all operations with the `shared_breaker` mistake; one for everything
/// with both.
type CellKey = (Option<Operation>, Option<usize>);

fn cell_key(config: &DemoConfig, op: Operation, i: usize) -> CellKey {
    let op = (!config.has(Mistake::SharedBreaker)).then_some(op);
    let instance = (!config.shared_counters).then_some(i);
    (op, instance)
}

fn breaker_cells(
    config: &DemoConfig,
    journal: &Arc<Journal>,
) -> BTreeMap<CellKey, Arc<BreakerCell>> {
    let mut guarded: BTreeMap<CellKey, Vec<BreakerLabels>> = BTreeMap::new();
    for i in 0..config.instances {
        for (op, _) in config.operations.configured() {
            guarded
                .entry(cell_key(config, op, i))
                .or_default()
                .push(BreakerLabels::new(op, i));
        }
    }
    // A breaker shared by all operations needs one configuration: the first configured operation's, as a
    // service with one "dependency breaker" would have.
    let first = config
        .operations
        .configured()
        .next()
        .map(|(op, _)| op)
        .unwrap_or(Operation::Pricing);
    guarded
        .into_iter()
        .map(|(key, labels)| {
            let op = key.0.unwrap_or(first);
            let breaker = config
                .operations
                .get(op)
                .map(|c| c.breaker.clone())
                .unwrap_or_else(|| op.recommended().breaker);
            let policy = Policy::new(&breaker, &config.mistakes);
            (
                key,
                Arc::new(BreakerCell::new(policy, labels, journal.clone())),
            )
        })
        .collect()
}

/// The demo's routes.
pub fn router(app: Arc<App>) -> Router {
    let admission = app.admission.clone();
    Router::new()
        .route("/product/{id}", get(product))
        .route("/checkout", axum::routing::post(checkout))
        .route("/admin/report", get(report))
        .route("/account/{id}", get(account_read).post(account_write))
        .route("/cart/{id}", get(cart).post(cart_write))
        .route("/order/{id}", axum::routing::post(order))
        .route("/health", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .layer(axum::middleware::from_fn_with_state(admission, admit))
        .with_state(app)
}

const X_FALLBACK: HeaderName = HeaderName::from_static("x-fallback");

fn not_configured(op: Operation) -> Response {
    (
        StatusCode::NOT_FOUND,
        format!("operation {} is not configured\n", op.key()),
    )
        .into_response()
}

/// The response for a single operation's answer: its status and body, `X-Fallback` and `Retry-After` if set.
fn respond(answer: Answer) -> Response {
    let mut headers = HeaderMap::new();
    if let Some(ct) = answer.content_type {
        headers.insert(CONTENT_TYPE, ct);
    }
    if let Some(kind) = answer.fallback {
        headers.insert(X_FALLBACK, HeaderValue::from_static(kind.label()));
    }
    if let Some(after) = answer.retry_after {
        // Retry-After is in whole seconds; round up so a caller never comes back early.
        let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        headers.insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    (answer.status, headers, answer.body).into_response()
}

/// The page's part from one answer: JSON if the body is JSON, otherwise the text.
fn part(answer: &Answer) -> serde_json::Value {
    serde_json::from_slice(&answer.body).unwrap_or_else(|_| {
        serde_json::Value::String(String::from_utf8_lossy(&answer.body).into_owned())
    })
}

async fn product(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let instance = app.pick();
    let context = app.context(&headers);
    let (price, reviews) = tokio::join!(
        instance.call(Operation::Pricing, &id, Bytes::new(), None, context),
        instance.call(Operation::Reviews, &id, Bytes::new(), None, context),
    );
    // A client error (unknown item) or an unavailable part is the page's answer.
    for answer in [&price, &reviews].into_iter().flatten() {
        if !answer.status.is_success() {
            return respond(answer.clone());
        }
    }
    let mut page = serde_json::Map::new();
    page.insert("id".into(), serde_json::Value::String(id));
    let mut headers = HeaderMap::new();
    let mut kinds: Vec<&str> = Vec::new();
    for (name, answer) in [("price", &price), ("reviews", &reviews)] {
        let Some(answer) = answer else { continue };
        page.insert(name.into(), part(answer));
        if let Some(kind) = answer.fallback {
            let header = if name == "price" {
                "x-fallback-pricing"
            } else {
                "x-fallback-reviews"
            };
            headers.insert(
                HeaderName::from_static(header),
                HeaderValue::from_static(kind.label()),
            );
            if !kinds.contains(&kind.label()) {
                kinds.push(kind.label());
            }
        }
    }
    if !kinds.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&kinds.join(", ")) {
            headers.insert(X_FALLBACK, v);
        }
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    (
        StatusCode::OK,
        headers,
        serde_json::Value::Object(page).to_string(),
    )
        .into_response()
}

async fn checkout(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let instance = app.pick();
    let key = app.idempotency_key(instance);
    match instance
        .call(
            Operation::Payments,
            "",
            body,
            Some(key),
            app.context(&headers),
        )
        .await
    {
        Some(answer) => respond(answer),
        None => not_configured(Operation::Payments),
    }
}

async fn report(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let instance = app.pick();
    match instance
        .call(
            Operation::Report,
            "report",
            Bytes::new(),
            None,
            app.context(&headers),
        )
        .await
    {
        Some(answer) => respond(answer),
        None => not_configured(Operation::Report),
    }
}

async fn account_read(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    plain(&app, Operation::AccountRead, &id, &headers).await
}

async fn account_write(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    write(&app, Operation::AccountWrite, &id, &headers, body).await
}

/// One call of `op` for item `id`, without a body or an idempotency key.
async fn plain(app: &App, op: Operation, id: &str, headers: &HeaderMap) -> Response {
    let instance = app.pick();
    match instance
        .call(op, id, Bytes::new(), None, app.context(headers))
        .await
    {
        Some(answer) => respond(answer),
        None => not_configured(op),
    }
}

/// One write of `op` for item `id`, with an idempotency key of its own (the same on its retries).
async fn write(app: &App, op: Operation, id: &str, headers: &HeaderMap, body: Bytes) -> Response {
    let instance = app.pick();
    let key = app.idempotency_key(instance);
    match instance
        .call(op, id, body, Some(key), app.context(headers))
        .await
    {
        Some(answer) => respond(answer),
        None => not_configured(op),
    }
}

async fn cart(State(app): State<Arc<App>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    plain(&app, Operation::Cart, &id, &headers).await
}

async fn order(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    plain(&app, Operation::Order, &id, &headers).await
}

/// Adds the body to the cart: 200 once Redis holds it; 503 + Retry-After (`X-Fallback: unavailable`) when it
/// could not be saved or its fate is unknown, never a faked success.
async fn cart_write(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    write(&app, Operation::CartWrite, &id, &headers, body).await
}

async fn metrics(State(app): State<Arc<App>>) -> Result<Response, Infallible> {
    let text = app.metrics().encode();
    let ct = HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8");
    Ok(([(CONTENT_TYPE, ct)], text).into_response())
}
