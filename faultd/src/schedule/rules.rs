//! The rules a configuration follows beyond its syntax, in one place: faultd's limits, patterns and methods,
//! TCP routes' addresses, TLS, the order and names of phases, and every behaviour's own checks.
//!
//! For: [`check`], which [`super::Plan::compile`] runs before compiling and [`Config::validate`] runs alone (a
//! configuration is validated before the files it names are read, and compiling needs them). Not for: the checks
//! that need the running faultd (an upstream that is one of its own listeners: `Config::check_not_own`), or
//! compiling.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::routing::{parse_method, PathPattern};
use crate::behaviours::Behaviour;
use crate::config::{Config, ConfigError, PhaseRoute};
use crate::invalid::Invalid;
use crate::limits::{check_config, check_name};
use crate::tcp::{self, TcpError, TcpProtocol};

/// Checks everything that parsing cannot: faultd's limits ([`crate::limits`]), patterns and methods, shares
/// add up to at most 100%, phases in ascending time with unique names, phases naming known routes, ramps
/// that end before the next phase. No route at all is valid: such a faultd answers every call 404 (counted as
/// unmatched) until a runner or the control API configures it.
pub(super) fn check(config: &Config) -> Result<(), ConfigError> {
    check_config(config)?;
    config.listen_addr()?;
    if config
        .http2
        .and_then(|h| h.max_concurrent_streams)
        .is_some_and(|n| n == 0)
    {
        return Err(Invalid::new(
            "http2.max_concurrent_streams",
            "at least 1 stream (0 would refuse every call)",
        )
        .into());
    }
    if let Some(u) = &config.unmatched {
        u.validate().map_err(|e| e.at("unmatched"))?;
    }
    if let Some(b) = config.bucket {
        if b.get() < Duration::from_millis(1) || b.get() > Duration::from_secs(60) {
            return Err(Invalid::new("bucket", format!("{b} is outside 1ms..60s")).into());
        }
    }
    let mut seen_patterns = BTreeMap::new();
    for (name, route) in &config.routes {
        let at = |e: Invalid| ConfigError::from(e.at(&format!("routes.{name}")));
        check_name("routes", name)?;
        check_instances(route).map_err(at)?;
        if let Some(tcp) = &route.tcp {
            check_tcp_route(route, tcp).map_err(at)?;
            check_kind(&route.base(), Some(tcp.protocol)).map_err(at)?;
            route.base().validate().map_err(at)?;
            continue;
        }
        PathPattern::parse(&route.path).map_err(|e| at(e.at("path")))?;
        let method = parse_method(route.method.as_deref()).map_err(|e| at(e.at("method")))?;
        let key = (method.as_ref().map(|m| m.to_string()), route.path.clone());
        if let Some(other) = seen_patterns.insert(key, name.clone()) {
            return Err(at(Invalid::new(
                "path",
                format!("route {other:?} already takes the same method and path"),
            )));
        }
        check_kind(&route.base(), None).map_err(at)?;
        route.base().validate().map_err(at)?;
    }
    check_sections(config)?;
    let mut names = BTreeSet::new();
    for (i, phase) in config.phases.iter().enumerate() {
        let at = |e: Invalid| ConfigError::from(e.at(&format!("phases[{i}]")));
        if phase.name.trim().is_empty() {
            return Err(at(Invalid::new("name", "a phase needs a name")));
        }
        if !names.insert(phase.name.as_str()) {
            return Err(at(Invalid::new(
                "name",
                format!("{:?} is used by an earlier phase", phase.name),
            )));
        }
        if i > 0 && phase.at <= config.phases[i - 1].at {
            return Err(at(Invalid::new(
                "at",
                format!(
                    "{} is not after the previous phase {:?} at {}; phases must be in ascending time",
                    phase.at,
                    config.phases[i - 1].name,
                    config.phases[i - 1].at
                ),
            )));
        }
        if let Some(ramp) = phase.ramp {
            if ramp.get().is_zero() {
                return Err(at(Invalid::new(
                    "ramp",
                    "a ramp must be longer than 0s (leave it out for a step)",
                )));
            }
            if let Some(next) = config.phases.get(i + 1) {
                if phase.at.get() + ramp.get() > next.at.get() {
                    return Err(at(Invalid::new(
                        "ramp",
                        format!(
                            "the {ramp} ramp runs past the start of {:?} at {}",
                            next.name, next.at
                        ),
                    )));
                }
            }
        }
        for (route_name, set) in &phase.routes {
            let Some(route) = config.routes.get(route_name) else {
                let known: Vec<&str> = config.routes.keys().map(String::as_str).collect();
                return Err(at(Invalid::new(
                    format!("routes.{route_name}"),
                    format!(
                        "no route named {route_name:?} (routes: {})",
                        known.join(", ")
                    ),
                )));
            };
            if let PhaseRoute::Instance(n, _) = set {
                let count = route.instances.unwrap_or(1);
                if route.instances.is_none() || *n == 0 || *n > count {
                    return Err(at(Invalid::new(
                        format!("routes.{route_name}.instance"),
                        match route.instances {
                            None => format!(
                                "route {route_name:?} has no instances (give it `instances: N`)"
                            ),
                            Some(_) => format!("route {route_name:?} has instances 1 to {count}"),
                        },
                    )));
                }
            }
            if let Some(b) = set.set() {
                check_kind(b, route.tcp.as_ref().map(|t| t.protocol))
                    .map_err(|e| at(e.at(&format!("routes.{route_name}"))))?;
                b.over(&route.base())
                    .validate()
                    .map_err(|e| at(e.at(&format!("routes.{route_name}"))))?;
            }
        }
    }
    Ok(())
}

/// The most instances a route may have: each is a listener of its own.
pub const MAX_INSTANCES: u32 = 64;

/// Checks a route's `instances`: 1 to [`MAX_INSTANCES`].
fn check_instances(route: &crate::config::Route) -> Result<(), Invalid> {
    match route.instances {
        None => Ok(()),
        Some(n) if n == 0 || n > MAX_INSTANCES => Err(Invalid::new(
            "instances",
            format!("{n} is outside 1..{MAX_INSTANCES}"),
        )),
        Some(_) => Ok(()),
    }
}

/// Checks a TCP route's own fields: no path or method, its listen and upstream addresses, `on_garbage` on a
/// protocol route only and `ssl` on a postgres route only.
fn check_tcp_route(
    route: &crate::config::Route,
    tcp: &crate::config::TcpEndpoint,
) -> Result<(), Invalid> {
    if !route.path.is_empty() {
        return Err(Invalid::new("path", "a TCP route has no path"));
    }
    if route.method.is_some() {
        return Err(Invalid::new("method", "a TCP route has no method"));
    }
    if tcp.upstream.is_empty() {
        return Err(Invalid::new("tcp.upstream", "give the upstream host:port"));
    }
    tcp::listen_addr(&tcp.listen).map_err(|e| tcp_invalid(e, "tcp.listen"))?;
    tcp::check_upstream(&tcp.upstream, &[])
        .or_else(|e| match e {
            // Hosts other than loopback are for faultd's `allow_hosts` to admit, at start.
            TcpError::Invalid { ref message, .. } if message.contains("allow_hosts") => Ok(()),
            e => Err(e),
        })
        .map_err(|e| tcp_invalid(e, "tcp.upstream"))?;
    if tcp.on_garbage.is_some() && tcp.protocol == TcpProtocol::Bytes {
        return Err(Invalid::new(
            "tcp.on_garbage",
            "on_garbage says what a route that frames a protocol does with bytes it cannot frame; give the route a `protocol` (redis or postgres)",
        ));
    }
    if tcp.ssl.is_some() && tcp.protocol != TcpProtocol::Postgres {
        return Err(Invalid::new(
            "tcp.ssl",
            "reads PostgreSQL: give the route `protocol: postgres`",
        ));
    }
    Ok(())
}

/// Checks that a behaviour fits its route: an HTTP route (`None`) takes HTTP behaviours, a bytes TCP route
/// `toxics` only, a Redis route `toxics` and `redis` entries, a postgres route `postgres` entries only.
fn check_kind(b: &Behaviour, tcp: Option<TcpProtocol>) -> Result<(), Invalid> {
    let Some(protocol) = tcp else {
        for (field, set) in [
            ("toxics", b.toxics.is_some()),
            ("postgres", b.postgres.is_some()),
        ] {
            if set {
                return Err(Invalid::new(
                    field,
                    format!("{field} act on TCP routes only (give the route `tcp: {{ listen, upstream }}`)"),
                ));
            }
        }
        if b.redis.is_some() {
            return Err(Invalid::new(
                "redis",
                "redis entries act on TCP routes that speak redis (give the route `tcp: { listen, upstream, protocol: redis }`)",
            ));
        }
        return Ok(());
    };
    if let Some(entries) = &b.redis {
        if protocol != TcpProtocol::Redis {
            return Err(Invalid::new(
                "redis",
                "redis entries act on a route that speaks redis: give it `tcp: { ..., protocol: redis }`",
            ));
        }
        crate::tcp::protocol::redis::validate_list(entries).map_err(|e| e.at("redis"))?;
    }
    let postgres = protocol == TcpProtocol::Postgres;
    if postgres && b.toxics.is_some() {
        return Err(Invalid::new(
            "toxics",
            "a route with protocol: postgres takes `postgres` entries (toxics act on bytes routes)",
        ));
    }
    if !postgres && b.postgres.is_some() {
        return Err(Invalid::new(
            "postgres",
            "postgres entries act on a route with `tcp: { protocol: postgres }`",
        ));
    }
    let http = serde_json::to_value(Behaviour {
        toxics: None,
        redis: None,
        postgres: None,
        ..b.clone()
    })
    .ok()
    .and_then(|v| v.as_object().and_then(|m| m.keys().next().cloned()));
    if let Some(field) = http {
        let takes = match protocol {
            TcpProtocol::Bytes => "`toxics`",
            TcpProtocol::Redis => "`toxics` and `redis` entries",
            TcpProtocol::Postgres => "`postgres` entries",
        };
        return Err(Invalid::new(
            field,
            format!("a TCP route takes {takes} only (HTTP behaviours act on HTTP routes)"),
        ));
    }
    if let Some(list) = &b.postgres {
        crate::behaviours::postgres::validate_list(list).map_err(|e| e.at("postgres"))?;
    }
    Ok(())
}

/// A TCP address problem as a validation failure of `field`.
fn tcp_invalid(e: TcpError, field: &str) -> Invalid {
    match e {
        TcpError::Invalid { message, .. } => Invalid::new(field, message),
        other => Invalid::new(field, other.to_string()),
    }
}

/// The sections beside the routes that follow the phases by name: `tls:` and `dns:`.
fn check_sections(config: &Config) -> Result<(), ConfigError> {
    let phases: Vec<&str> = config.phases.iter().map(|p| p.name.as_str()).collect();
    if let Some(tls) = &config.tls {
        tls.validate()
            .and_then(|()| tls.check_phase_names(&phases))
            .map_err(|e| ConfigError::from(e.at("tls")))?;
    }
    if let Some(dns) = &config.dns {
        dns.validate(&phases)
            .map_err(|e| ConfigError::from(e.at("dns")))?;
    }
    Ok(())
}
