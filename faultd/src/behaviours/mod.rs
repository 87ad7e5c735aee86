//! Behaviours: what a route does to the calls it receives, one small type per fault, in the Toxiproxy manner.
//!
//! For: the parameters of each fault exactly as the scenario writes them, their validation, and [`decide`], the
//! pure function that turns a behaviour and a call's seeded draws into what that call gets. Not for: timing (the
//! schedule picks the behaviour), sockets (the data plane carries out the decision) or counting (the recorder).
//!
//! `fault_list!` below is the only place that knows every fault. Each line names a file of this folder and the
//! field a scenario writes (`hang.rs => hang: Hang`); from that one list come the fields of [`Behaviour`], of a
//! route's base behaviour (`config::Route`) and of a matched entry ([`Matched`]) with their serde attributes and
//! JSON Schema, [`Behaviour::over`], [`Behaviour::scale_time`], the validation with the sum of shares, and the
//! order in which [`decide`] gives a call its fault. Each file's type implements [`Fault`], whose methods all have defaults: a fault says whether
//! it takes a share of the calls and what such a call gets, or that the first N calls get something, how to
//! check its parameters, and how `--time-scale` changes it.
//!
//! Adding a fault means one file here with one type that implements [`Fault`], and one line in `fault_list!`,
//! as long as its calls end in one of the data plane's [`CallAction`]s; a new way of ending a call is also a new
//! [`CallAction`] and its arm in `crate::http`'s actions.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::invalid::Invalid;
pub use h2_code::H2Code;

mod h2_code;
pub mod matched;

pub use matched::{CallFacts, ConnectionCounts, Match, Matched, Per};

use crate::draw::CallDraws;

/// The faults, one line each: `file.rs => field: Type`, with the field's documentation above it. The order of
/// the lines is the order of the fields in a behaviour (and in its JSON) and the order in which a call's fault is
/// decided: first every count rule ("the first N calls"), then every share, each in list order. A field holding a
/// list (`errors`) takes one share per entry.
///
/// The list is handed to a macro that builds from it: `behaviour_from_list!` here, `route_from_list!` in
/// `config/mod.rs`.
macro_rules! fault_list {
    ($then:ident) => {
        $then! {
            /// The delay before any answer (not before a hang).
            latency.rs => latency: Latency,
            /// Error responses, each with its share. `[]` clears the base's errors.
            error.rs => errors: Vec<ErrorResponse>,
            /// The share of calls held until the caller gives up.
            hang.rs => hang: Hang,
            /// The share of calls whose connection is reset.
            reset.rs => reset: Reset,
            /// The share of calls whose connection is closed with no response.
            empty.rs => empty: Empty,
            /// The share of calls answered with bytes that are not HTTP.
            malformed.rs => malformed: Malformed,
            /// The share of calls whose healthy answer is cut halfway through its body.
            truncated.rs => truncated: Truncated,
            /// Stream healthy bodies at this rate.
            slow_body.rs => slow_body: SlowBody,
            /// Forward healthy calls to this upstream instead of answering them.
            proxy.rs => proxy: Proxy,
            /// The healthy response.
            response.rs => response: Response,
            /// The first N calls after this behaviour is set fail with a status.
            fail_first.rs => fail_first: FailFirst,
            /// gRPC errors (status, message, trailing metadata), each with its share.
            grpc_error.rs => grpc_errors: Vec<GrpcError>,
            /// The share of HTTP/2 streams reset with an error code.
            rst_stream.rs => rst_stream: RstStream,
            /// GOAWAY on an HTTP/2 connection once it has carried N streams.
            goaway.rs => goaway: GoAway,
            /// The healthy gRPC answer.
            grpc_response.rs => grpc_response: GrpcResponse,
            /// TCP routes only: Toxiproxy's toxics on the route's connections. A phase's list replaces the
            /// route's; `[]` clears it.
            toxics.rs => toxics: Vec<TcpToxic>,
            /// TCP routes with `protocol: redis` only: faults for single commands, each entry `{ name, match:
            /// { command, key }, share | every | calls | first, per, error | delay | hang | close }`. A phase's
            /// list replaces the route's; `[]` clears it.
            redis.rs => redis: Vec<RedisEntry>,
            /// TCP routes with `protocol: postgres` only: statement faults, each entry `{ name, match: {
            /// statement }, share | every | calls | first, per, error | delay | terminate }`. A phase's list
            /// replaces the route's; `[]` clears it.
            postgres.rs => postgres: Vec<PostgresFault>,
        }
    };
}
pub(crate) use fault_list;

/// Declares each file of the list as a module whose public items this module re-exports, and builds
/// [`Behaviour`] and the code that walks its fields in list order.
macro_rules! behaviour_from_list {
    ($( $(#[$doc:meta])* $module:ident.rs => $field:ident: $ty:ty, )*) => {
        $( pub mod $module; pub use $module::*; )*

        /// A route's behaviour: a route's base, or what a phase sets on top of it. Every field is optional; a
        /// phase's behaviour replaces the base field by field ([`Behaviour::over`]), so `{latency: {fixed: 2s}}`
        /// keeps the base's response and errors. The shares of the faults that take one (`errors`, `hang`,
        /// `reset`, ...) add up to at most 100%; the rest of the calls get the healthy response.
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct Behaviour {
            $(
                $(#[$doc])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $field: Option<$ty>,
            )*
            /// Behaviours for the calls that carry something (a method, a header, a query parameter, gRPC
            /// metadata), tried in order before this behaviour's own: the first entry that takes a call gives it
            /// the entry's fields laid over this behaviour. A phase's list replaces the base's; `[]` clears it.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub matched: Option<Vec<Matched>>,
        }

        impl Behaviour {
            /// The fields of a behaviour, in list order.
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// This behaviour laid over `base`: each field set here wins, each field left out comes from `base`.
            pub fn over(&self, base: &Behaviour) -> Behaviour {
                Behaviour {
                    $( $field: self.$field.as_ref().or(base.$field.as_ref()).cloned(), )*
                    matched: self.matched.as_ref().or(base.matched.as_ref()).cloned(),
                }
            }

            /// Multiplies every duration by `factor` and divides every rate by it; counts and shares are
            /// unchanged.
            pub fn scale_time(&mut self, factor: f64) {
                $( if let Some(f) = &mut self.$field { FaultField::scale_time(f, factor); } )*
                self.matched.iter_mut().flatten().for_each(|m| m.scale_time(factor));
            }

            /// Shows `visit` each field in list order, with the same field of `from` (the behaviour a ramp comes
            /// from) beside it; stops at the first break.
            fn each_field<'a, V: VisitFields<'a>>(
                from: Option<&'a Behaviour>,
                to: &'a Behaviour,
                visit: &mut V,
            ) -> ControlFlow<V::Break> {
                $( visit.field(stringify!($field), from.and_then(|b| b.$field.as_ref()), to.$field.as_ref())?; )*
                ControlFlow::Continue(())
            }
        }
    };
}

fault_list!(behaviour_from_list);

/// One fault of the list: its parameters are the type, deserialised straight from the scenario. Every method has
/// a default, so a fault implements only what it does.
pub trait Fault {
    /// Whether this fault takes a share of the calls (`hang: 5%`). Such shares add up to at most 100% in a
    /// behaviour, and a call's fault is drawn among them.
    const TAKES_A_SHARE: bool = false;

    /// The share of calls this fault takes; only asked of faults that take a share.
    fn share(&self) -> Share {
        Share::from_fraction(0.0)
    }

    /// What a call taken by this fault gets.
    fn action(&self) -> CallAction<'_> {
        CallAction::Healthy
    }

    /// A count rule: the first N calls under this behaviour get this action, before any share is drawn.
    fn first_calls(&self) -> Option<(u64, CallAction<'_>)> {
        None
    }

    /// Checks the parameters; fields are named relative to this fault (`status`, `p99`).
    fn validate(&self) -> Result<(), Invalid> {
        Ok(())
    }

    /// Checks this fault against the rest of the behaviour it is in; fields are named relative to the behaviour.
    fn fits(&self, _behaviour: &Behaviour) -> Result<(), Invalid> {
        Ok(())
    }

    /// Multiplies every duration by `factor` and divides every rate by it (`--time-scale`).
    fn scale_time(&mut self, _factor: f64) {}
}

/// What a field of [`Behaviour`] holds: one fault (`hang: 5%`) or a list of them (`errors: [...]`), each fault
/// taking one slot of the decision.
trait FaultField {
    const TAKES_A_SHARE: bool;
    /// How many slots of the decision this field takes.
    fn slots(&self) -> usize;
    /// The share and action of one slot.
    fn slot(&self, i: usize) -> Option<(Share, CallAction<'_>)>;
    fn first_calls(&self) -> Option<(u64, CallAction<'_>)>;
    fn validate(&self) -> Result<(), Invalid>;
    fn fits(&self, behaviour: &Behaviour) -> Result<(), Invalid>;
    fn scale_time(&mut self, factor: f64);
    /// Whether an excess of shares is reported on this field rather than on the whole behaviour: a list names
    /// itself when it has entries, since that is where a person adjusts several shares at once.
    fn holds_the_shares(&self) -> bool;
}

impl<F: Fault> FaultField for F {
    const TAKES_A_SHARE: bool = F::TAKES_A_SHARE;

    fn slots(&self) -> usize {
        usize::from(F::TAKES_A_SHARE)
    }

    fn slot(&self, i: usize) -> Option<(Share, CallAction<'_>)> {
        (F::TAKES_A_SHARE && i == 0).then(|| (self.share(), self.action()))
    }

    fn first_calls(&self) -> Option<(u64, CallAction<'_>)> {
        Fault::first_calls(self)
    }

    fn validate(&self) -> Result<(), Invalid> {
        Fault::validate(self)
    }

    fn fits(&self, behaviour: &Behaviour) -> Result<(), Invalid> {
        Fault::fits(self, behaviour)
    }

    fn scale_time(&mut self, factor: f64) {
        Fault::scale_time(self, factor);
    }

    fn holds_the_shares(&self) -> bool {
        false
    }
}

impl<F: Fault> FaultField for Vec<F> {
    const TAKES_A_SHARE: bool = F::TAKES_A_SHARE;

    fn slots(&self) -> usize {
        if F::TAKES_A_SHARE {
            self.len()
        } else {
            0
        }
    }

    fn slot(&self, i: usize) -> Option<(Share, CallAction<'_>)> {
        self.get(i).and_then(|f| f.slot(0))
    }

    fn first_calls(&self) -> Option<(u64, CallAction<'_>)> {
        None
    }

    fn validate(&self) -> Result<(), Invalid> {
        for (i, f) in self.iter().enumerate() {
            Fault::validate(f).map_err(|e| e.at(&format!("[{i}]")))?;
        }
        Ok(())
    }

    fn fits(&self, behaviour: &Behaviour) -> Result<(), Invalid> {
        self.iter().try_for_each(|f| Fault::fits(f, behaviour))
    }

    fn scale_time(&mut self, factor: f64) {
        self.iter_mut().for_each(|f| Fault::scale_time(f, factor));
    }

    fn holds_the_shares(&self) -> bool {
        F::TAKES_A_SHARE && !self.is_empty()
    }
}

/// Work done on a behaviour's fields in list order by [`Behaviour::each_field`].
trait VisitFields<'a> {
    type Break;
    fn field<F: FaultField>(
        &mut self,
        name: &'static str,
        from: Option<&'a F>,
        to: Option<&'a F>,
    ) -> ControlFlow<Self::Break>;
}

/// Checks that a status is a final HTTP status (200-599); 1xx are interim answers, not responses.
pub fn check_status(status: u16) -> Result<(), Invalid> {
    if (200..=599).contains(&status) {
        Ok(())
    } else {
        Err(Invalid::new(
            "",
            format!("{status} is not a final HTTP status (200-599)"),
        ))
    }
}

/// Checks header names and values.
pub fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), Invalid> {
    response::header_map(headers).map(|_| ())
}

/// What one call gets, after its delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CallAction<'a> {
    /// The healthy response (or the upstream's, in proxy mode).
    Healthy,
    /// One of the behaviour's error responses.
    Error(&'a ErrorResponse),
    /// One of the first N calls of a `fail_first` phase, answered with this status.
    FailFirst(u16),
    /// Held until the caller gives up; no delay applies.
    Hang,
    /// Connection reset (RST) with no response.
    Reset,
    /// Connection closed (FIN) with no response.
    Empty,
    /// Bytes that are not HTTP, then a close.
    Malformed,
    /// The healthy answer cut halfway through its body: the connection (HTTP/1.1) or the stream (HTTP/2) ends
    /// short of the length the head announced.
    Truncated,
    /// A gRPC status in the trailers (an HTTP status for a plain call).
    GrpcError(&'a GrpcError),
    /// The HTTP/2 stream reset with this code (the connection, on HTTP/1.1).
    RstStream(H2Code),
}

/// The decision for one call: how long to wait, then what to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallDecision<'a> {
    /// The delay before the action (zero for a hang).
    pub delay: Duration,
    /// What the call gets.
    pub action: CallAction<'a>,
}

impl Behaviour {
    /// Checks every parameter, each fault against the others, and that the shares add up to at most 100%.
    /// Fields are named relative to this behaviour (`latency.p99`, `errors[1].status`).
    pub fn validate(&self) -> Result<(), Invalid> {
        let mut check = Validate {
            behaviour: self,
            total: 0.0,
            share_names: Vec::new(),
            shares_field: "",
        };
        if let ControlFlow::Break(e) = Behaviour::each_field(None, self, &mut check) {
            return Err(e);
        }
        if check.total > 1.0 + 1e-9 {
            let names = match check.share_names.split_last() {
                Some((last, [])) => last.to_string(),
                Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
                None => String::new(),
            };
            return Err(Invalid::new(
                check.shares_field,
                format!(
                    "the shares of {names} add up to {}%, over 100%",
                    (check.total * 1e4).round() / 1e2
                ),
            ));
        }
        match &self.matched {
            Some(list) => matched::validate_list(list, self).map_err(|e| e.at("matched")),
            None => Ok(()),
        }
    }
}

/// Validation, field by field: parameters, fit with the rest, and the running sum of shares.
struct Validate<'a> {
    behaviour: &'a Behaviour,
    total: f64,
    share_names: Vec<&'static str>,
    shares_field: &'static str,
}

impl<'a> VisitFields<'a> for Validate<'a> {
    type Break = Invalid;

    fn field<F: FaultField>(
        &mut self,
        name: &'static str,
        _from: Option<&'a F>,
        to: Option<&'a F>,
    ) -> ControlFlow<Invalid> {
        if F::TAKES_A_SHARE {
            self.share_names.push(name);
        }
        let Some(f) = to else {
            return ControlFlow::Continue(());
        };
        if let Err(e) = f.validate() {
            return ControlFlow::Break(e.at(name));
        }
        if let Err(e) = f.fits(self.behaviour) {
            return ControlFlow::Break(e);
        }
        self.total += (0..f.slots())
            .filter_map(|i| f.slot(i))
            .map(|(share, _)| share.fraction())
            .sum::<f64>();
        if self.shares_field.is_empty() && f.holds_the_shares() {
            self.shares_field = name;
        }
        ControlFlow::Continue(())
    }
}

/// A behaviour made ready for the hot path: validated, its latency model and healthy response built once, and
/// the counters of its count rules (`fail_first`). One exists per (route, phase), so counts restart with each
/// phase.
#[derive(Debug)]
pub struct CompiledBehaviour {
    /// The behaviour as configured (already laid over the route's base).
    pub behaviour: Behaviour,
    latency: Option<LatencyModel>,
    /// The healthy response, built once.
    pub healthy: PreparedResponse,
    /// Calls taken so far by each field's count rule, in list order.
    first_calls_used: Box<[AtomicU64]>,
    /// The `matched` entries, compiled over this behaviour.
    entries: Box<[matched::CompiledEntry]>,
}

impl Behaviour {
    /// Reads the files this behaviour names (a gRPC answer's `message_file` or `.proto` files) from where `files`
    /// allows; `route_path` is the path of the route it answers.
    pub fn read_files(
        &mut self,
        files: &crate::files::Files,
        route_path: Option<&str>,
    ) -> Result<(), Invalid> {
        if let Some(g) = &mut self.grpc_response {
            g.read_file(files, route_path)
                .map_err(|e| e.at("grpc_response"))?;
        }
        for (i, e) in self.grpc_errors.iter_mut().flatten().enumerate() {
            e.read_files(files)
                .map_err(|x| x.at(&format!("grpc_errors[{i}]")))?;
        }
        for (i, entry) in self.matched.iter_mut().flatten().enumerate() {
            let mut b = entry.behaviour();
            b.read_files(files, route_path)
                .map_err(|x| x.at(&format!("matched[{i}]")))?;
            entry.set_behaviour(b);
        }
        Ok(())
    }

    /// This behaviour with the files it names written inline, for a faultd that cannot read them.
    pub fn inlined(&self) -> Behaviour {
        Behaviour {
            grpc_response: self.grpc_response.as_ref().map(GrpcResponse::inlined),
            grpc_errors: self
                .grpc_errors
                .as_ref()
                .map(|list| list.iter().map(GrpcError::inlined).collect()),
            matched: self.matched.as_ref().map(|list| {
                list.iter()
                    .map(|entry| {
                        let mut inlined = entry.clone();
                        inlined.set_behaviour(entry.behaviour().inlined());
                        inlined
                    })
                    .collect()
            }),
            ..self.clone()
        }
    }
}

impl CompiledBehaviour {
    /// Validates and prepares `behaviour`; its matched entries count their calls on their own.
    pub fn compile(behaviour: &Behaviour) -> Result<CompiledBehaviour, Invalid> {
        CompiledBehaviour::compile_with(behaviour, None, &|_| Arc::default())
    }

    /// Validates and prepares `behaviour`, its matched entries counting their calls in the tallies `tallies`
    /// hands out by entry name (the recorder's, for a route it records). `healthy` is an already built healthy
    /// response to share, for a behaviour whose `response` is the one it was built from.
    pub fn compile_with(
        behaviour: &Behaviour,
        healthy: Option<&PreparedResponse>,
        tallies: matched::Tallies<'_>,
    ) -> Result<CompiledBehaviour, Invalid> {
        behaviour.validate()?;
        if behaviour
            .grpc_response
            .as_ref()
            .is_some_and(GrpcResponse::file_unread)
        {
            // A configuration that skipped `read_files` would otherwise answer with an empty message.
            return Err(Invalid::new(
                "grpc_response",
                "its files were not read (read a configuration's files with Config::read_files)",
            ));
        }
        if let Some(i) = behaviour
            .grpc_errors
            .iter()
            .flatten()
            .position(GrpcError::unread)
        {
            return Err(Invalid::new(
                format!("grpc_errors[{i}].details"),
                "they were not encoded (read a configuration's files with Config::read_files)",
            ));
        }
        let latency = behaviour
            .latency
            .as_ref()
            .map(Latency::model)
            .transpose()
            .map_err(|e| e.at("latency"))?;
        let healthy = match healthy {
            Some(h) => h.clone(),
            None => behaviour
                .response
                .clone()
                .unwrap_or_default()
                .prepare()
                .map_err(|e| e.at("response"))?,
        };
        Ok(CompiledBehaviour {
            entries: matched::compile_entries(behaviour, &healthy, tallies)?,
            behaviour: behaviour.clone(),
            latency,
            healthy,
            first_calls_used: Behaviour::FIELDS
                .iter()
                .map(|_| AtomicU64::new(0))
                .collect(),
        })
    }

    fn delay(&self, u: f64) -> Duration {
        self.latency
            .as_ref()
            .map_or(Duration::ZERO, |m| m.quantile(u))
    }
}

/// Decides what one call gets. `to` is the behaviour in force; during a ramp, `from` is the previous phase's and
/// `weight` (0..=1) how far the ramp has gone: every delay quantile and every fault share moves linearly from
/// `from`'s value to `to`'s. Count rules come first, then the shares in list order; the rest is healthy. Pure
/// but for the count rules, whose counters on `to` this call may consume.
pub fn decide<'a>(
    from: Option<&'a CompiledBehaviour>,
    to: &'a CompiledBehaviour,
    weight: f64,
    draws: CallDraws,
) -> CallDecision<'a> {
    let w = if from.is_some() {
        weight.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let delay_to = to.delay(draws.latency).as_secs_f64();
    let delay = match from {
        Some(f) if w < 1.0 => f.delay(draws.latency).as_secs_f64() * (1.0 - w) + delay_to * w,
        _ => delay_to,
    };
    let delay = Duration::from_secs_f64(delay.max(0.0));

    let mut counts = CountRules {
        used: &to.first_calls_used,
        field: 0,
    };
    let mut shares = DrawShare {
        fault: draws.fault,
        weight: w,
        ramping: from.is_some(),
        upper: 0.0,
    };
    let taken = match Behaviour::each_field(None, &to.behaviour, &mut counts) {
        ControlFlow::Break(action) => Some(action),
        ControlFlow::Continue(()) => {
            match Behaviour::each_field(from.map(|f| &f.behaviour), &to.behaviour, &mut shares) {
                ControlFlow::Break(action) => Some(action),
                ControlFlow::Continue(()) => None,
            }
        }
    };
    match taken {
        Some(CallAction::Hang) => CallDecision {
            delay: Duration::ZERO,
            action: CallAction::Hang,
        },
        Some(action) => CallDecision { delay, action },
        None => CallDecision {
            delay,
            action: CallAction::Healthy,
        },
    }
}

/// The count rules of the behaviour in force: the first of them whose count is not used up takes the call.
struct CountRules<'c> {
    used: &'c [AtomicU64],
    field: usize,
}

impl<'a> VisitFields<'a> for CountRules<'_> {
    type Break = CallAction<'a>;

    fn field<F: FaultField>(
        &mut self,
        _name: &'static str,
        _from: Option<&'a F>,
        to: Option<&'a F>,
    ) -> ControlFlow<CallAction<'a>> {
        let used = &self.used[self.field];
        self.field += 1;
        if let Some((calls, action)) = to.and_then(|f| f.first_calls()) {
            if used.load(Ordering::Relaxed) < calls && used.fetch_add(1, Ordering::Relaxed) < calls
            {
                return ControlFlow::Break(action);
            }
        }
        ControlFlow::Continue(())
    }
}

/// The draw among shares: slot by slot, each share (blended along a ramp) takes its stretch of [0, 1), and the
/// call's uniform draw falls in one of them or past them all (healthy). A list's slots pair up by position, so a
/// ramp to fewer errors fades the old ones out.
struct DrawShare {
    fault: f64,
    weight: f64,
    ramping: bool,
    upper: f64,
}

impl<'a> VisitFields<'a> for DrawShare {
    type Break = CallAction<'a>;

    fn field<F: FaultField>(
        &mut self,
        _name: &'static str,
        from: Option<&'a F>,
        to: Option<&'a F>,
    ) -> ControlFlow<CallAction<'a>> {
        let w = self.weight;
        let slots = to.map_or(0, F::slots).max(from.map_or(0, F::slots));
        for slot in 0..slots {
            let later = to.and_then(|f| f.slot(slot));
            let earlier = from.and_then(|f| f.slot(slot));
            let share_to = later.map_or(0.0, |(s, _)| s.fraction());
            let share = match earlier {
                Some((e, _)) if w < 1.0 => e.fraction() * (1.0 - w) + share_to * w,
                None if self.ramping => share_to * w,
                _ => share_to,
            };
            self.upper += share;
            if self.fault < self.upper {
                if let Some((_, action)) = later.or(earlier) {
                    return ControlFlow::Break(action);
                }
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests;
