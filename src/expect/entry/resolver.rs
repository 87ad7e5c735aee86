//! Resolving an entry's names against the scenario: each phase, breaker and route it names must exist, and the
//! error says which field named what, with the names there are.

use super::{BreakerEntry, DependencyEntry, SutEntry};
use crate::expect::breaker::BreakerCheck;
use crate::expect::dependency::DependencyCheck;
use crate::expect::spec::{Names, WhileOpen};
use crate::expect::sut::SutCheck;

/// The scenario's names, asked for by the field that names them.
pub(super) struct Resolver<'n, 'a> {
    pub(super) names: &'n Names<'a>,
}

impl Resolver<'_, '_> {
    pub(super) fn phase(&self, field: &str, p: &str) -> Result<String, String> {
        if self.names.phases.iter().any(|n| n == p) {
            Ok(p.to_string())
        } else {
            Err(format!(
                "`{field}` names phase `{p}`, which the scenario does not have (phases: {})",
                list(self.names.phases)
            ))
        }
    }

    pub(super) fn during(&self, p: Option<&str>) -> Result<Option<String>, String> {
        p.map(|p| self.phase("during", p)).transpose()
    }

    pub(super) fn after(&self, p: &str) -> Result<String, String> {
        self.phase("after", p)
    }

    pub(super) fn breaker(&self, b: &str) -> Result<String, String> {
        if self.names.breakers.iter().any(|n| n == b) {
            Ok(b.to_string())
        } else {
            Err(format!(
                "`breaker` names `{b}`, which is not under `breakers:` (breakers: {})",
                list(self.names.breakers)
            ))
        }
    }

    pub(super) fn route(&self, field: &str, r: &str) -> Result<String, String> {
        if self.names.routes.iter().any(|n| n == r) {
            Ok(r.to_string())
        } else {
            Err(format!(
                "`{field}` names route `{r}`, which is not under `dependency.routes` (routes: {})",
                list(self.names.routes)
            ))
        }
    }

    /// A name the dependency's resolver answers, as its recording keys it (lower case, no final dot).
    pub(super) fn dns_name(&self, field: &str, n: &str) -> Result<String, String> {
        let key = faultd::dns::name_key(n);
        if self
            .names
            .dns_names
            .iter()
            .any(|d| faultd::dns::name_key(d) == key)
        {
            Ok(key)
        } else if self.names.dns_names.is_empty() {
            Err(format!(
                "`{field}` names `{n}`, but the dependency has no resolver: give it `dependency.dns.names`"
            ))
        } else {
            Err(format!(
                "`{field}` names `{n}`, which is not under `dependency.dns.names` (names: {})",
                list(self.names.dns_names)
            ))
        }
    }

    /// The route a breaker check counts at: the one written under `route`, else the one the breaker guards.
    pub(super) fn guarded(
        &self,
        route: Option<&str>,
        breaker: &str,
    ) -> Result<Option<String>, String> {
        match route {
            Some(r) => self.route("route", r).map(Some),
            None => Ok((self.names.breaker_routes)(breaker)),
        }
    }

    pub(super) fn while_open(&self, w: Option<&WhileOpen>) -> Result<Option<String>, String> {
        match w {
            None | Some(WhileOpen::Only(false)) => Ok(None),
            Some(WhileOpen::Only(true)) => match self.names.breakers {
                [only] => Ok(Some(only.clone())),
                _ => Err("`while_open: true` needs exactly one breaker in the scenario; name the breaker instead".into()),
            },
            Some(WhileOpen::Breaker(b)) => self.breaker(b).map(Some),
        }
    }

    pub(super) fn breaker_check(
        &self,
        breaker: &str,
        b: BreakerEntry<'_>,
    ) -> Result<BreakerCheck, String> {
        let breaker = self.breaker(breaker)?;
        Ok(match b {
            BreakerEntry::OpensWithin {
                within,
                after,
                route,
            } => BreakerCheck::OpensWithin {
                within,
                after: self.after(after)?,
                route: self.guarded(route, &breaker)?,
                breaker,
            },
            BreakerEntry::ClosesWithin {
                within,
                after,
                route,
            } => BreakerCheck::ClosesWithin {
                within,
                after: self.after(after)?,
                route: self.guarded(route, &breaker)?,
                breaker,
            },
            BreakerEntry::StaysClosed { during } => BreakerCheck::StaysClosed {
                during: self.during(during)?,
                breaker,
            },
            BreakerEntry::TransitionsAtMost {
                at_most,
                route,
                during,
            } => BreakerCheck::TransitionsAtMost {
                at_most,
                during: self.during(during)?,
                route: self.guarded(route, &breaker)?,
                breaker,
            },
            BreakerEntry::ProbesPerHalfOpenAtMost { at_most, route } => {
                let route = self.guarded(route, &breaker)?.ok_or_else(|| format!("`probes_per_half_open_at_most` needs `route:` (the dependency route breaker `{breaker}` guards)"))?;
                BreakerCheck::ProbesPerHalfOpenAtMost {
                    breaker,
                    route,
                    at_most,
                }
            }
        })
    }

    pub(super) fn dependency_check(
        &self,
        route: &str,
        d: DependencyEntry<'_>,
    ) -> Result<DependencyCheck, String> {
        let route = self.route("dependency", route)?;
        Ok(match d {
            DependencyEntry::MaxInFlight {
                bound,
                inclusive,
                counted,
                during,
            } => DependencyCheck::MaxInFlight {
                route,
                bound,
                inclusive,
                during: self.during(during)?,
                counted,
            },
            DependencyEntry::GrpcStatus {
                code,
                bound,
                at_least,
                during,
            } => DependencyCheck::GrpcStatus {
                route,
                code,
                bound,
                at_least,
                during: self.during(during)?,
            },
            DependencyEntry::RateWhileOpen {
                below,
                breaker,
                while_open,
            } => {
                let breaker = match (breaker, self.while_open(while_open)?) {
                    (Some(b), _) => self.breaker(b)?,
                    (None, Some(b)) => b,
                    (None, None) => {
                        return Err("`rate_while_open_below` needs `while_open: <breaker>`".into())
                    }
                };
                DependencyCheck::RateWhileOpen {
                    route,
                    breaker,
                    below,
                }
            }
            DependencyEntry::Amplification { at_most, during } => DependencyCheck::Amplification {
                route,
                at_most,
                during: self.during(during)?,
            },
            DependencyEntry::HandshakeAmplification {
                at_most,
                during,
                over,
            } => {
                if !self.names.tls {
                    return Err("`handshakes_per_request_at_most` counts the TLS handshakes of the dependency, which does not speak TLS: add `tls: {}` under `dependency`".into());
                }
                DependencyCheck::HandshakeAmplification {
                    route,
                    at_most,
                    during: self.during(during)?,
                    over,
                }
            }
        })
    }

    pub(super) fn sut_check(&self, s: SutEntry<'_>) -> Result<SutCheck, String> {
        Ok(match s {
            SutEntry::Latency {
                percentile,
                below,
                during,
                while_open,
                over,
                class,
            } => SutCheck::Latency {
                percentile,
                below,
                during: self.during(during)?,
                while_open: self.while_open(while_open)?,
                over,
                class,
            },
            SutEntry::Goodput {
                at_least,
                during,
                over,
            } => SutCheck::Goodput {
                at_least,
                during: self.during(during)?,
                over,
            },
            SutEntry::Share {
                of,
                bound,
                above,
                during,
                over,
            } => SutCheck::Share {
                of,
                bound,
                above,
                during: self.during(during)?,
                over,
            },
        })
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}
