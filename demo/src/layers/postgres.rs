//! The innermost service of the operations backed by PostgreSQL (`order`): one short transaction on a connection
//! taken from a deadpool-postgres pool (tokio-postgres underneath), its outcome turned into a [`Reply`].
//!
//! The transaction places an order: `BEGIN ISOLATION LEVEL SERIALIZABLE`, [`UPDATE`] (the account's balance down
//! by one), [`INSERT`] (the order's row), `COMMIT`. Under SERIALIZABLE the server may abort any transaction with
//! 40001 (serialization failure) or 40P01 (deadlock detected), and PostgreSQL's manual says what the application
//! must do: run the whole transaction again. So the client does, at most [`TRANSACTION_RETRIES`] more times, each
//! after a short jittered pause so that transactions which collided do not collide again in lockstep; the
//! `no_transaction_retry` mistake hands the first such failure to the caller instead. Any other error is the
//! call's at once: retrying a constraint violation or a broken connection here would only repeat it.
//!
//! The tables are created, if missing, before a pool's first order (under an advisory lock, so that the pools of
//! several instances do not race on `CREATE TABLE IF NOT EXISTS`): accounts 1 to [`ACCOUNTS`] with a balance
//! large enough for any run. An order for an account that does not exist is a 404, not a failure.
//!
//! Not a timeout: tokio-postgres's connect timeout is left unset, so the operation's timeout layer bounds the
//! whole call, retries included. Not the operation's retry layer either: that one repeats calls, this one
//! repeats a transaction the database asked to be repeated.

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode};
use bytes::Bytes;
use deadpool_postgres::tokio_postgres::error::SqlState;
use deadpool_postgres::tokio_postgres::{self, IsolationLevel, NoTls};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::OnceCell;
use tower::Service;

use super::{CallError, DepRequest, Reply};

/// How many times a transaction the database aborted with 40001 or 40P01 runs again, at most.
pub const TRANSACTION_RETRIES: u32 = 3;

/// The pause before the first run again; each further one doubles it. Jittered to between half and one and a
/// half times this.
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// The accounts the tables are created with (ids 1 to this).
pub const ACCOUNTS: i32 = 1_000;

/// The user and database when the address is a bare `host:port`: the ones `initdb -U postgres` makes.
const DEFAULT_USER: &str = "postgres";
const DEFAULT_DATABASE: &str = "postgres";

/// Serialises table creation across the pools (and processes) that share a database.
const SCHEMA_LOCK: i64 = 0x6661_756c_746c;

const SCHEMA: &str = "BEGIN; \
    SELECT pg_advisory_xact_lock(SCHEMA_LOCK); \
    CREATE TABLE IF NOT EXISTS accounts (id integer PRIMARY KEY, balance bigint NOT NULL); \
    CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, account integer NOT NULL, \
        placed_at timestamptz NOT NULL DEFAULT now()); \
    INSERT INTO accounts SELECT g, 1000000000 FROM generate_series(1, ACCOUNTS) g ON CONFLICT (id) DO NOTHING; \
    COMMIT";

/// The account's balance down by one.
pub const UPDATE: &str = "UPDATE accounts SET balance = balance - 1 WHERE id = $1";
/// The order's row, its id returned.
pub const INSERT: &str = "INSERT INTO orders (account) VALUES ($1) RETURNING id";

/// Whether the database asks for the whole transaction to run again: a serialization failure (40001) or a
/// deadlock (40P01), the two SQLSTATEs PostgreSQL's manual names for it. Every other code, and an error without
/// one (a broken connection), is final.
pub fn asks_for_retry(code: Option<&SqlState>) -> bool {
    code.is_some_and(|c| {
        *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    })
}

/// The pause before run `again` (1 for the first run again): [`RETRY_PAUSE`] doubled per run, times a factor
/// drawn from [0.5, 1.5).
pub fn retry_pause(again: u32) -> Duration {
    let base = RETRY_PAUSE * 2u32.saturating_pow(again.saturating_sub(1)).min(64);
    base.mul_f64(0.5 + rand::random::<f64>())
}

/// One run of a transaction on the state it needs (a connection), as a future that borrows it.
pub type Run<'a, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'a>>;

/// Runs `transaction` on `state` until it succeeds, fails for good (`retry(&error)` false), or has run again
/// `retries` times; pauses [`retry_pause`] before each run again.
pub async fn run_transaction<S, T, E>(
    state: &mut S,
    retries: u32,
    retry: impl Fn(&E) -> bool,
    transaction: impl for<'a> Fn(&'a mut S) -> Run<'a, T, E>,
) -> Result<T, E> {
    let mut again = 0;
    loop {
        match transaction(state).await {
            Err(e) if again < retries && retry(&e) => {
                again += 1;
                tokio::time::sleep(retry_pause(again)).await;
            }
            done => return done,
        }
    }
}

/// Places each [`DepRequest`] as an order for account `key`, one transaction on one PostgreSQL server through a
/// pool of connections.
#[derive(Clone)]
pub struct PostgresClient {
    pool: Pool,
    /// Runs again after 40001 and 40P01 (off with the `no_transaction_retry` mistake).
    retries: u32,
    schema: Arc<OnceCell<()>>,
}

impl std::fmt::Debug for PostgresClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresClient")
            .field("status", &self.pool.status())
            .field("retries", &self.retries)
            .finish()
    }
}

/// The connection settings of `addr`: `host:port` (user and database `postgres`), or a URL
/// `postgresql://user@host:port/database` for anything else.
pub fn connection(addr: &str) -> Result<tokio_postgres::Config, String> {
    if addr.starts_with("postgres://") || addr.starts_with("postgresql://") {
        return tokio_postgres::Config::from_str(addr).map_err(|e| e.to_string());
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(format!(
            "expected host:port or postgresql://..., got {addr:?}"
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("expected host:port or postgresql://..., got {addr:?}"))?;
    if host.is_empty() || host.contains('/') {
        return Err(format!(
            "expected host:port or postgresql://..., got {addr:?}"
        ));
    }
    let mut config = tokio_postgres::Config::new();
    config
        .host(host.trim_start_matches('[').trim_end_matches(']'))
        .port(port)
        .user(DEFAULT_USER)
        .dbname(DEFAULT_DATABASE)
        .application_name("faultline-demo");
    Ok(config)
}

impl PostgresClient {
    /// A client of the server at `addr` (see [`connection`]) with at most `pool` connections, none opened yet;
    /// a transaction the database aborts with 40001 or 40P01 runs again unless `retry` is false.
    pub fn new(addr: &str, pool: usize, retry: bool) -> Result<Self, String> {
        let manager = Manager::from_config(
            connection(addr)?,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool)
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(PostgresClient {
            pool,
            retries: if retry { TRANSACTION_RETRIES } else { 0 },
            schema: Arc::default(),
        })
    }

    /// Connections open now (checked out or idle), as the pool counts them.
    pub fn open(&self) -> usize {
        self.pool.status().size
    }
}

/// The call's error for a database error: its SQLSTATE and message when the server sent one.
fn failed(e: tokio_postgres::Error) -> CallError {
    match e.as_db_error() {
        Some(db) => CallError::Database(format!("{}: {}", db.code().code(), db.message())),
        None => CallError::Transport(format!("postgres: {e}")),
    }
}

/// One run of the order's transaction on `client`: the new order's id, or `None` when the account does not exist
/// (the transaction is rolled back as it is dropped).
async fn place_order(
    client: &mut deadpool_postgres::Client,
    account: i32,
) -> Result<Option<i64>, tokio_postgres::Error> {
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::Serializable)
        .start()
        .await?;
    let update = tx.prepare_cached(UPDATE).await?;
    if tx.execute(&update, &[&account]).await? == 0 {
        return Ok(None);
    }
    let insert = tx.prepare_cached(INSERT).await?;
    let order: i64 = tx.query_one(&insert, &[&account]).await?.get(0);
    tx.commit().await?;
    Ok(Some(order))
}

impl Service<DepRequest> for PostgresClient {
    type Response = Reply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, CallError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: DepRequest) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let Ok(account) = req.key.parse::<i32>() else {
                return Ok(reply(
                    StatusCode::BAD_REQUEST,
                    "{\"error\":\"account ids are integers\"}".into(),
                ));
            };
            let mut client = this
                .pool
                .get()
                .await
                .map_err(|e| CallError::Transport(format!("postgres pool: {e}")))?;
            this.schema
                .get_or_try_init(|| async {
                    let schema = SCHEMA
                        .replace("SCHEMA_LOCK", &SCHEMA_LOCK.to_string())
                        .replace("ACCOUNTS", &ACCOUNTS.to_string());
                    client.batch_execute(&schema).await
                })
                .await
                .map_err(failed)?;
            let placed = run_transaction(
                &mut client,
                this.retries,
                |e: &tokio_postgres::Error| asks_for_retry(e.code()),
                |client| Box::pin(place_order(client, account)),
            )
            .await
            .map_err(failed)?;
            Ok(match placed {
                Some(order) => reply(
                    StatusCode::CREATED,
                    format!("{{\"order\":{order},\"account\":{account}}}"),
                ),
                None => reply(
                    StatusCode::NOT_FOUND,
                    "{\"error\":\"no such account\"}".into(),
                ),
            })
        })
    }
}

fn reply(status: StatusCode, body: String) -> Reply {
    Reply {
        status,
        body: Bytes::from(body),
        content_type: Some(HeaderValue::from_static("application/json")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialization_failures_and_deadlocks_ask_for_a_retry_and_nothing_else_does() {
        assert!(asks_for_retry(Some(&SqlState::T_R_SERIALIZATION_FAILURE)));
        assert!(asks_for_retry(Some(&SqlState::T_R_DEADLOCK_DETECTED)));
        assert!(asks_for_retry(Some(&SqlState::from_code("40001"))));
        for code in [
            "23505", "25P02", "57014", "40002", "40003", "53300", "XX000",
        ] {
            assert!(!asks_for_retry(Some(&SqlState::from_code(code))), "{code}");
        }
        assert!(!asks_for_retry(None), "a broken connection is final");
    }

    #[test]
    fn the_pause_doubles_per_run_again_with_jitter_around_it() {
        for again in 1..=3u32 {
            let base = RETRY_PAUSE * 2u32.pow(again - 1);
            let pauses: Vec<Duration> = (0..200).map(|_| retry_pause(again)).collect();
            assert!(
                pauses.iter().all(|p| *p >= base / 2 && *p < base * 3 / 2),
                "{pauses:?}"
            );
            let distinct: std::collections::BTreeSet<_> = pauses.iter().collect();
            assert!(
                distinct.len() > 100,
                "jittered: {} distinct of 200",
                distinct.len()
            );
        }
        assert!(
            retry_pause(40) < RETRY_PAUSE * 100,
            "bounded however many runs"
        );
    }

    /// A transaction that fails with `codes` in turn, then succeeds; counts its runs.
    async fn runs_until(codes: &[&'static str], retries: u32) -> (Result<u32, &'static str>, u32) {
        let mut runs = 0u32;
        let result = run_transaction(
            &mut runs,
            retries,
            |code: &&str| asks_for_retry(Some(&SqlState::from_code(code))),
            |runs| {
                let n = *runs;
                *runs += 1;
                let outcome = codes.get(n as usize).map_or(Ok(n), |c| Err(*c));
                Box::pin(async move { outcome })
            },
        )
        .await;
        (result, runs)
    }

    #[tokio::test(start_paused = true)]
    async fn a_serialization_failure_runs_the_whole_transaction_again() {
        assert_eq!(runs_until(&["40001", "40P01"], 3).await, (Ok(2), 3));
        assert_eq!(runs_until(&[], 3).await, (Ok(0), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_bounded_and_other_errors_are_final() {
        assert_eq!(runs_until(&["40001"; 10], 3).await, (Err("40001"), 4));
        assert_eq!(runs_until(&["23505", "40001"], 3).await, (Err("23505"), 1));
        // The `no_transaction_retry` mistake: the first serialization failure is the caller's.
        assert_eq!(runs_until(&["40001"], 0).await, (Err("40001"), 1));
    }

    #[test]
    fn an_address_is_host_and_port_or_a_url() {
        let c = connection("127.0.0.1:5433").unwrap();
        assert_eq!(c.get_ports(), &[5433]);
        assert_eq!(c.get_user(), Some("postgres"));
        assert_eq!(c.get_dbname(), Some("postgres"));
        let c = connection("postgresql://shop@127.0.0.1:5434/orders").unwrap();
        assert_eq!(
            (c.get_user(), c.get_dbname()),
            (Some("shop"), Some("orders"))
        );
        for bad in ["localhost", "127.0.0.1:x", ":5432", "", "postgresql://[::1"] {
            assert!(PostgresClient::new(bad, 4, true).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_transport_error_and_opens_nothing() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = free.local_addr().unwrap().to_string();
        drop(free);
        let mut client = PostgresClient::new(&addr, 4, true).unwrap();
        let req = DepRequest {
            method: axum::http::Method::POST,
            path: "/order/1".into(),
            body: Bytes::new(),
            key: "1".into(),
            idempotency_key: None,
            context: Default::default(),
        };
        let err = client.call(req).await.unwrap_err();
        assert!(matches!(err, CallError::Transport(_)), "{err:?}");
        assert_eq!(client.open(), 0);
    }
}
