//! The dependency operations the demo calls, with the names every metric and log line uses and the recommended
//! settings of each (taken from the seeds).
//!
//! Not for the HTTP handlers or the layers: this module only says *what* each operation is (its key, the
//! dependency service it belongs to, the path it calls, its recommended configuration), so one table holds every
//! number the seeds give.

use std::fmt;

use axum::http::Method;
use faultline_units::{Dur, Share};

use crate::settings::{BreakerConfig, Fallback, OperationConfig, OutlierConfig, RetryConfig};

/// One kind of call to the dependency. Each has its own breaker (per-operation breakers, seeds 001 and 004),
/// unless the `shared_breaker` mistake is switched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// GET {dep}/price/{id}, for the product page. Seed 000's pricing call.
    Pricing,
    /// GET {dep}/reviews/{id}, for the product page. Seed 001's hotel-booking reviews call.
    Reviews,
    /// POST {dep}/payments/charge, for checkout. Seed 004's payment provider; never fakes success.
    Payments,
    /// GET {dep}/report, for the admin report. Seed 000's low-traffic admin endpoint.
    Report,
    /// GET {dep}/accounts/{id}. Seed 004's separate read breaker.
    AccountRead,
    /// POST {dep}/accounts/{id}. Seed 004's separate write breaker.
    AccountWrite,
    /// `GET cart:{id}` on Redis (not the HTTP dependency), for the cart page: a database behind a connection
    /// pool, seed 000's pool-exhaustion story where it happens as often as over HTTP.
    Cart,
    /// A transaction on PostgreSQL (not the HTTP dependency) placing an order: one account's balance down, one
    /// order row in, under SERIALIZABLE, where the database may ask for the whole transaction to run again.
    Order,
    /// `RPUSH cart:{id}` on Redis, for adding an item to the cart: a write Redis cannot recognise when it comes
    /// twice (no idempotency key reaches it), so it is retried only when Redis said it did nothing.
    CartWrite,
}

impl Operation {
    /// Every operation, in the order used for display and for choosing the `shared_breaker` settings.
    pub const ALL: [Operation; 9] = [
        Operation::Pricing,
        Operation::Reviews,
        Operation::Payments,
        Operation::Report,
        Operation::AccountRead,
        Operation::AccountWrite,
        Operation::Cart,
        Operation::Order,
        Operation::CartWrite,
    ];

    /// The operation key used in the configuration and in the `operation` label: `pricing`, `account-read`, ...
    pub fn key(self) -> &'static str {
        match self {
            Operation::Pricing => "pricing",
            Operation::Reviews => "reviews",
            Operation::Payments => "payments",
            Operation::Report => "report",
            Operation::AccountRead => "account-read",
            Operation::AccountWrite => "account-write",
            Operation::Cart => "cart",
            Operation::Order => "order",
            Operation::CartWrite => "cart-write",
        }
    }

    /// The dependency service the operation belongs to (the `dependency` label): account reads and writes are
    /// two operations of one service, `accounts`, and the cart's reads and writes two of `cart`.
    pub fn dependency(self) -> &'static str {
        match self {
            Operation::AccountRead | Operation::AccountWrite => "accounts",
            Operation::CartWrite => "cart",
            other => other.key(),
        }
    }

    /// The HTTP method of the call to the dependency.
    pub fn method(self) -> Method {
        match self {
            Operation::Payments
            | Operation::AccountWrite
            | Operation::Order
            | Operation::CartWrite => Method::POST,
            _ => Method::GET,
        }
    }

    /// The path called on the dependency for the item `id` (ignored by operations without an item).
    pub fn path(self, id: &str) -> String {
        match self {
            Operation::Pricing => format!("/price/{id}"),
            Operation::Reviews => format!("/reviews/{id}"),
            Operation::Payments => "/payments/charge".to_string(),
            Operation::Report => "/report".to_string(),
            Operation::AccountRead | Operation::AccountWrite => format!("/accounts/{id}"),
            Operation::Cart | Operation::CartWrite => format!("/cart/{id}"),
            Operation::Order => format!("/order/{id}"),
        }
    }

    /// Whether the operation talks to Redis (the `redis:` address of the configuration) rather than to the
    /// HTTP dependency.
    pub fn is_redis(self) -> bool {
        matches!(self, Operation::Cart | Operation::CartWrite)
    }

    /// Whether the operation talks to PostgreSQL (the `postgres:` address of the configuration).
    pub fn is_postgres(self) -> bool {
        matches!(self, Operation::Order)
    }

    /// The operation's position in [`Operation::ALL`], used to index per-operation tables.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Writes may only fail visibly: a faked success on a payment or an account write loses money or data
    /// (seeds 003 and 004: "payments: fail closed, never fake success").
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Operation::Payments | Operation::AccountWrite | Operation::Order | Operation::CartWrite
        )
    }

    /// A write its dependency cannot recognise when it comes twice: the HTTP writes carry an `Idempotency-Key`
    /// the dependency de-duplicates on, a Redis command carries none. Such a write is retried only after a
    /// failure that proves it was not carried out ([`crate::layers::CallError::NotApplied`]); a timed-out one
    /// may have been.
    pub fn is_unrepeatable(self) -> bool {
        matches!(self, Operation::CartWrite)
    }

    /// The body served as the `default` fallback: an empty answer of the right shape.
    pub fn default_body(self) -> &'static [u8] {
        match self {
            Operation::Pricing => b"{\"price\":null}",
            Operation::Reviews => b"[]",
            Operation::Report => b"{\"rows\":[]}",
            Operation::AccountRead => b"{}",
            Operation::Cart => b"{\"items\":[]}",
            Operation::Payments
            | Operation::AccountWrite
            | Operation::Order
            | Operation::CartWrite => b"",
        }
    }

    /// The recommended configuration, with the seed each number comes from.
    pub fn recommended(self) -> OperationConfig {
        let ms = Dur::from_millis;
        let share = |percent: f64| Share::from_fraction(percent / 100.0);
        let no_retries = no_retries();
        match self {
            // Seed 000: 250 ms timeout (3x the 80 ms p99), a 200-connection pool, 50% over 10 s with at least 20
            // calls, open 30 s, a single probe whose success closes, the last cached price as fallback.
            Operation::Pricing => OperationConfig {
                endpoints: Vec::new(),
                outlier: OutlierConfig::default(),
                timeout: ms(250),
                pool: 200,
                fallback: Fallback::Stale,
                breaker: seed_000_breaker(),
                retries: no_retries,
                hedge: None,
            },
            // Seed 001's fix: 800 ms timeout, 30% over >= 20 calls, 30 s open, slow calls over 400 ms count
            // toward the 30%, a bulkhead of 80, the page served without reviews. Seed 003: 3 half-open probes.
            Operation::Reviews => OperationConfig {
                endpoints: Vec::new(),
                outlier: OutlierConfig::default(),
                timeout: ms(800),
                pool: 80,
                fallback: Fallback::Default,
                breaker: BreakerConfig {
                    failure_rate: share(30.0),
                    window: ms(10_000),
                    min_calls: 20,
                    open_for: ms(30_000),
                    half_open_calls: 3,
                    close_after: 3,
                    slow_call_duration: ms(400),
                    slow_call_rate: share(30.0),
                    recovery_rate: None,
                },
                retries: no_retries,
                hedge: None,
            },
            // Seed 004: timeout 2-3x p99, 50% over >= 10 calls, 30 s reset, 2 successes to close, retries
            // wrapped by the breaker; seed 000: a retry budget. Never a fake success: 503 + Retry-After.
            Operation::Payments => OperationConfig {
                endpoints: Vec::new(),
                outlier: OutlierConfig::default(),
                timeout: ms(2_000),
                pool: 50,
                fallback: Fallback::Unavailable {
                    retry_after: ms(5_000),
                },
                breaker: seed_004_breaker(ms(1_200)),
                retries: RetryConfig {
                    max: 2,
                    backoff: ms(50),
                    budget: share(10.0),
                },
                hedge: None,
            },
            // Seed 000's low-traffic admin endpoint: "a tight timeout and a single retry"; the breaker has the
            // seed's numbers so the per-instance volume floor can be shown.
            Operation::Report => OperationConfig {
                endpoints: Vec::new(),
                outlier: OutlierConfig::default(),
                timeout: ms(1_000),
                pool: 20,
                fallback: Fallback::Unavailable {
                    retry_after: ms(30_000),
                },
                breaker: seed_000_breaker(),
                retries: RetryConfig {
                    max: 1,
                    backoff: ms(100),
                    budget: share(10.0),
                },
                hedge: None,
            },
            // Seed 004's internal-service profile for the read side: more sensitive (30%), faster reset (10 s),
            // 3 successes to close; stale account data beats none.
            Operation::AccountRead => OperationConfig {
                endpoints: Vec::new(),
                outlier: OutlierConfig::default(),
                timeout: ms(500),
                pool: 100,
                fallback: Fallback::Stale,
                breaker: BreakerConfig {
                    failure_rate: share(30.0),
                    window: ms(10_000),
                    min_calls: 20,
                    open_for: ms(10_000),
                    half_open_calls: 3,
                    close_after: 3,
                    slow_call_duration: ms(400),
                    slow_call_rate: share(50.0),
                    recovery_rate: None,
                },
                retries: no_retries,
                hedge: None,
            },
            // Seed 004's separate write breaker: a failing write must not block reads, and vice versa.
            Operation::AccountWrite => OperationConfig {
                endpoints: Vec::new(),
                outlier: OutlierConfig::default(),
                timeout: ms(2_000),
                pool: 50,
                fallback: Fallback::Unavailable {
                    retry_after: ms(10_000),
                },
                breaker: seed_004_breaker(ms(1_000)),
                retries: no_retries,
                hedge: None,
            },
            Operation::Cart | Operation::CartWrite | Operation::Order => self.recommended_store(),
        }
    }

    /// The recommended configuration of the operations on a data store (Redis, PostgreSQL).
    fn recommended_store(self) -> OperationConfig {
        let ms = Dur::from_millis;
        let share = |percent: f64| Share::from_fraction(percent / 100.0);
        let no_retries = no_retries();
        match self {
            // A read from Redis answers in about a millisecond: a 100 ms timeout leaves room for a pause without
            // letting a slow server hold the pool; 20 connections (a common pool size) at seed 000's breaker; an
            // empty cart beats an error page.
            Operation::Cart => OperationConfig {
                endpoints: Vec::new(),
                outlier: OutlierConfig::default(),
                timeout: ms(100),
                pool: 20,
                fallback: Fallback::Default,
                breaker: seed_000_breaker(),
                retries: no_retries,
                hedge: None,
            },
            // A transaction of four round trips takes a few milliseconds: 500 ms leaves room for its runs again
            // (three at most, 10-40 ms apart) and for a pause, and a pool of 20 connections is a common size.
            // Seed 004's write breaker, as for any write; an order is never faked, the caller is told to retry.
            // The call is not retried by the retry layer: the client already runs the transaction again when the
            // database asks, and any other failure would only repeat.
            Operation::Order => OperationConfig {
                endpoints: Vec::new(),
                outlier: OutlierConfig::default(),
                timeout: ms(500),
                pool: 20,
                fallback: Fallback::Unavailable {
                    retry_after: ms(1_000),
                },
                breaker: seed_004_breaker(ms(250)),
                retries: no_retries,
                hedge: None,
            },
            // Adding to the cart: the read's timeout and pool; a write that failed is answered 503 + Retry-After
            // (never a faked success). Redis loading its dataset after a restart refuses every command for a few
            // seconds without doing it (-LOADING): two retries, 200 ms and 400 ms later, ride out a short one. A
            // timed-out write is not retried: Redis may have applied it.
            Operation::CartWrite => OperationConfig {
                endpoints: Vec::new(),
                outlier: OutlierConfig::default(),
                timeout: ms(100),
                pool: 20,
                fallback: Fallback::Unavailable {
                    retry_after: ms(1_000),
                },
                breaker: seed_000_breaker(),
                retries: RetryConfig {
                    max: 2,
                    backoff: ms(200),
                    budget: share(10.0),
                },
                hedge: None,
            },
            _ => unreachable!("{self} is not an operation on a data store"),
        }
    }
}

/// No retries (the budget kept for a configuration that turns them on).
fn no_retries() -> RetryConfig {
    RetryConfig {
        max: 0,
        backoff: Dur::from_millis(50),
        budget: Share::from_fraction(0.1),
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// Seed 004's write breaker: 50% failures over 10 s with a 10-call floor, open 30 s, two probes and two
/// successes to close; calls slower than `slow_call_duration` count as failures at 50%.
fn seed_004_breaker(slow_call_duration: Dur) -> BreakerConfig {
    BreakerConfig {
        failure_rate: Share::from_fraction(0.5),
        window: Dur::from_millis(10_000),
        min_calls: 10,
        open_for: Dur::from_millis(30_000),
        half_open_calls: 2,
        close_after: 2,
        slow_call_duration,
        slow_call_rate: Share::from_fraction(0.5),
        recovery_rate: None,
    }
}

/// Seed 000's breaker: 50% failures over a rolling 10 s window with a 20-call floor, open 30 s, one probe that
/// closes it; slow calls count only past 1 s.
pub(crate) fn seed_000_breaker() -> BreakerConfig {
    BreakerConfig {
        failure_rate: Share::from_fraction(0.5),
        window: Dur::from_millis(10_000),
        min_calls: 20,
        open_for: Dur::from_millis(30_000),
        half_open_calls: 1,
        close_after: 1,
        slow_call_duration: Dur::from_millis(1_000),
        slow_call_rate: Share::ALL,
        recovery_rate: None,
    }
}
