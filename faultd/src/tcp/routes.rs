//! The registry of TCP routes: create, read, change and delete routes and their toxics while faultd runs.
//!
//! For: the library API of TCP routes, with Toxiproxy's semantics (a proxy's listen port picked at creation and
//! kept across disable and enable, `populate` replacing only what changed, `reset` re-enabling every proxy and
//! removing every toxic), and the recordings of all routes. Every operation takes the registry's lock only to
//! swap small values or bind a socket; connections never take it. Not for: HTTP (see `crate::toxiproxy`) or
//! moving bytes (see [`super::proxy`]).

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::protocol::Wire;
use super::proxy::{listen, Listening, RouteShared};
use super::record::{TcpRecorder, TcpRouteRecording};
use super::{
    check_not_own, check_upstream, listen_addr_allowing, OnGarbage, ProxySpec, ProxyUpdate,
    ProxyView, Ssl, TcpError, TcpProtocol, Toxic, ToxicSpec, ToxicUpdate, ToxicView,
};
use crate::limits::{MAX_ENTRIES, MAX_ROUTES};

/// What every TCP route of one faultd shares.
#[derive(Debug, Clone)]
pub struct TcpSettings {
    /// The seed of toxicity and jitter draws.
    pub seed: u64,
    /// Hosts other than loopback an upstream may name (as faultd's HTTP proxy rule: loopback unless named).
    pub allow_hosts: Vec<String>,
    /// Addresses other than loopback a route may listen on (`0.0.0.0` in a container); loopback only when empty.
    pub allow_listen: Vec<std::net::IpAddr>,
    /// The listen backlog of each route.
    pub backlog: u32,
    /// The recorder's bucket.
    pub bucket: Duration,
    /// Where latency toxics end their delays precisely (a timerfd); tokio's 1 ms timer when `None`.
    pub deadlines: Option<crate::deadlines::Deadlines>,
    /// faultd's other listeners (data plane, control API, Toxiproxy API), which no upstream may name.
    pub faultd_listeners: Vec<SocketAddr>,
}

impl Default for TcpSettings {
    fn default() -> TcpSettings {
        TcpSettings {
            seed: 0x5EED,
            allow_hosts: Vec::new(),
            allow_listen: Vec::new(),
            backlog: 8192,
            bucket: crate::recorder::DEFAULT_BUCKET,
            deadlines: None,
            faultd_listeners: Vec::new(),
        }
    }
}

/// One route: its shared state, and its listener while enabled.
#[derive(Debug)]
struct Route {
    shared: Arc<RouteShared>,
    /// The address bound at creation (with the real port), kept so a disabled route comes back on it.
    listen: SocketAddr,
    listening: Option<Listening>,
    /// The route's instances (`instances: N`), in order: each a listener of its own with its own toxics,
    /// forwarding to the route's upstream and recording into the route's recorder as well as its own. They go
    /// down and come back with the route.
    instances: Vec<Route>,
}

impl Route {
    fn view(&self) -> ProxyView {
        ProxyView {
            name: self.shared.name.clone(),
            listen: self.listen.to_string(),
            upstream: self.shared.upstream.clone(),
            enabled: self.listening.is_some(),
            toxics: self.toxics().iter().map(Toxic::view).collect(),
        }
    }

    fn toxics(&self) -> Arc<Vec<Toxic>> {
        self.shared.toxics.borrow().clone()
    }

    /// Stops listening and closes every open connection, on the route and its instances.
    fn disable(&mut self) {
        if let Some(l) = self.listening.take() {
            l.stop();
        }
        self.shared.kill.send_modify(|epoch| *epoch += 1);
        self.instances.iter_mut().for_each(Route::disable);
    }

    fn enable(&mut self, backlog: u32) -> Result<(), TcpError> {
        if self.listening.is_none() {
            let l = bind(self.listen, backlog, self.shared.clone())?;
            self.listening = Some(l);
        }
        self.instances
            .iter_mut()
            .try_for_each(|i| i.enable(backlog))
    }

    /// Every address the route listens on: its own, then its instances'.
    fn listeners(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        std::iter::once(self.listen).chain(self.instances.iter().map(|i| i.listen))
    }

    /// What the route recorded, with its protocol's recording (which its instances share, so it is the route's
    /// alone) and each instance's own.
    fn recording(&self) -> TcpRouteRecording {
        let own = self
            .shared
            .recorder
            .snapshot(self.listen.to_string(), self.shared.upstream.clone());
        let mut recording = match &self.shared.wire {
            Some(w) => w.record(own),
            None => own,
        };
        recording.instances = self
            .instances
            .iter()
            .map(|i| {
                i.shared
                    .recorder
                    .snapshot(i.listen.to_string(), i.shared.upstream.clone())
            })
            .collect();
        recording
    }
}

fn bind(addr: SocketAddr, backlog: u32, shared: Arc<RouteShared>) -> Result<Listening, TcpError> {
    listen(addr, backlog, shared).map_err(|source| {
        if source.kind() == io::ErrorKind::AddrInUse {
            TcpError::ListenTaken { addr, source }
        } else {
            TcpError::Bind { addr, source }
        }
    })
}

/// Every TCP route of one faultd.
#[derive(Debug)]
pub struct TcpRoutes {
    settings: TcpSettings,
    routes: Mutex<BTreeMap<String, Route>>,
    origin: Mutex<Instant>,
}

impl TcpRoutes {
    /// An empty registry; t = 0 is now until [`TcpRoutes::set_origin`].
    pub fn new(settings: TcpSettings) -> TcpRoutes {
        TcpRoutes {
            settings,
            routes: Mutex::new(BTreeMap::new()),
            origin: Mutex::new(Instant::now()),
        }
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Route>> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the run's t = 0 for every route's recorder (and for routes created later).
    pub fn set_origin(&self, origin: Instant) {
        *self.origin.lock().unwrap_or_else(|p| p.into_inner()) = origin;
        for route in self.routes().values() {
            route.shared.recorder.set_origin(origin);
            for instance in &route.instances {
                instance.shared.recorder.set_origin(origin);
            }
        }
    }

    /// Creates and (if `enabled`) starts a route. Must run inside the tokio runtime.
    pub fn create(&self, spec: ProxySpec) -> Result<ProxyView, TcpError> {
        let mut routes = self.routes();
        self.create_locked(&mut routes, spec, Vec::new(), None)
    }

    fn create_locked(
        &self,
        routes: &mut BTreeMap<String, Route>,
        spec: ProxySpec,
        toxics: Vec<Toxic>,
        carried: Option<Wire>,
    ) -> Result<ProxyView, TcpError> {
        if spec.name.is_empty() {
            return Err(TcpError::MissingField("name"));
        }
        crate::limits::check_name("name", &spec.name)?;
        if spec.upstream.is_empty() {
            return Err(TcpError::MissingField("upstream"));
        }
        if routes.contains_key(&spec.name) {
            return Err(TcpError::ProxyExists(spec.name));
        }
        TcpError::at_most(routes.len() + 1, MAX_ROUTES, "proxies")?;
        let addr = listen_addr_allowing(&spec.listen, &self.settings.allow_listen)?;
        check_upstream(&spec.upstream, &self.settings.allow_hosts)?;
        let origin = *self.origin.lock().unwrap_or_else(|p| p.into_inner());
        let shared = Arc::new(RouteShared {
            name: spec.name.clone(),
            upstream: spec.upstream.clone(),
            allow_hosts: Arc::new(self.settings.allow_hosts.clone()),
            seed: self.settings.seed,
            toxics: watch::channel(Arc::new(toxics)).0,
            kill: watch::channel(0).0,
            recorder: Arc::new(TcpRecorder::new(self.settings.bucket, origin)),
            accepted: AtomicU64::new(0),
            deadlines: self.settings.deadlines.clone(),
            wire: carried.or_else(|| {
                Wire::new(
                    spec.protocol,
                    &spec.name,
                    self.settings.seed,
                    spec.on_garbage,
                    spec.ssl,
                )
            }),
        });
        // Bind even a disabled route once, so its port is known and kept, as Toxiproxy reports it.
        let listening = bind(addr, self.settings.backlog, shared.clone())?;
        // Checked once bound, since a route may name the port it was just given.
        let mut own = self.own_listeners_in(routes);
        own.push(listening.addr);
        if let Err(e) = check_not_own(&spec.upstream, &own) {
            listening.stop();
            return Err(e);
        }
        let mut route = Route {
            shared,
            listen: listening.addr,
            listening: Some(listening),
            instances: Vec::new(),
        };
        if !spec.enabled {
            route.disable();
        }
        let view = route.view();
        routes.insert(spec.name, route);
        Ok(view)
    }

    /// Creates the routes that do not exist, recreates those whose listen address or upstream changed, and
    /// keeps the others (enabled). On an error, the routes created by this call are removed again and the
    /// error comes back with the routes kept so far.
    pub fn populate(
        &self,
        specs: Vec<ProxySpec>,
    ) -> Result<Vec<ProxyView>, (TcpError, Vec<ProxyView>)> {
        for spec in &specs {
            if spec.name.is_empty() {
                return Err((TcpError::MissingField("name"), Vec::new()));
            }
            if spec.upstream.is_empty() {
                return Err((TcpError::MissingField("upstream"), Vec::new()));
            }
        }
        let mut routes = self.routes();
        let mut created: Vec<String> = Vec::new();
        let mut views = Vec::new();
        for spec in specs {
            if let Some(existing) = routes.get_mut(&spec.name) {
                let same_listen = spec.listen.is_empty()
                    || listen_addr_allowing(&spec.listen, &self.settings.allow_listen)
                        .is_ok_and(|a| a == existing.listen || a.port() == 0);
                if same_listen && spec.upstream == existing.shared.upstream {
                    if let Err(e) = existing.enable(self.settings.backlog) {
                        return Err((e, views));
                    }
                    views.push(existing.view());
                    continue;
                }
                if let Some(mut old) = routes.remove(&spec.name) {
                    old.disable();
                }
            }
            let name = spec.name.clone();
            match self.create_locked(
                &mut routes,
                ProxySpec {
                    enabled: true,
                    ..spec
                },
                Vec::new(),
                None,
            ) {
                Ok(view) => {
                    created.push(name);
                    views.push(view);
                }
                Err(e) => {
                    for name in &created {
                        if let Some(mut r) = routes.remove(name) {
                            r.disable();
                        }
                    }
                    views.retain(|v| !created.contains(&v.name));
                    return Err((e, views));
                }
            }
        }
        Ok(views)
    }

    /// Every address faultd listens on: its data plane, control and Toxiproxy APIs, and every TCP route's
    /// listener. No upstream may name one of them.
    pub fn own_listeners(&self) -> Vec<SocketAddr> {
        self.own_listeners_in(&self.routes())
    }

    fn own_listeners_in(&self, routes: &BTreeMap<String, Route>) -> Vec<SocketAddr> {
        let mut own = self.settings.faultd_listeners.clone();
        own.extend(routes.values().flat_map(Route::listeners));
        own
    }

    /// Every route, by name.
    pub fn list(&self) -> BTreeMap<String, ProxyView> {
        self.routes()
            .iter()
            .map(|(name, r)| (name.clone(), r.view()))
            .collect()
    }

    /// One route.
    pub fn get(&self, name: &str) -> Result<ProxyView, TcpError> {
        self.routes()
            .get(name)
            .map(Route::view)
            .ok_or_else(|| TcpError::ProxyNotFound(name.to_string()))
    }

    /// Changes a route: a new listen address or upstream rebinds it (closing its connections, keeping its
    /// toxics); `enabled: false` takes it down (connects refused, open connections closed).
    pub fn update(&self, name: &str, update: ProxyUpdate) -> Result<ProxyView, TcpError> {
        let mut routes = self.routes();
        let route = routes
            .get_mut(name)
            .ok_or_else(|| TcpError::ProxyNotFound(name.to_string()))?;
        let new_listen = match update.listen.as_deref() {
            Some(l) if !l.is_empty() => {
                let a = listen_addr_allowing(l, &self.settings.allow_listen)?;
                (a != route.listen && !(a.port() == 0 && a.ip() == route.listen.ip())).then_some(a)
            }
            _ => None,
        };
        let new_upstream = match update.upstream {
            Some(u) if !u.is_empty() && u != route.shared.upstream => {
                check_upstream(&u, &self.settings.allow_hosts)?;
                Some(u)
            }
            _ => None,
        };
        let enabled = update.enabled.unwrap_or(route.listening.is_some());
        if new_listen.is_some() || new_upstream.is_some() {
            let spec = ProxySpec {
                name: name.to_string(),
                listen: new_listen.unwrap_or(route.listen).to_string(),
                upstream: new_upstream.unwrap_or_else(|| route.shared.upstream.clone()),
                enabled,
                protocol: route
                    .shared
                    .wire
                    .as_ref()
                    .map_or(TcpProtocol::Bytes, |w| w.protocol()),
                on_garbage: route
                    .shared
                    .wire
                    .as_ref()
                    .map_or(OnGarbage::Pass, |w| w.on_garbage()),
                ssl: route.shared.wire.as_ref().map_or(Ssl::Refuse, |w| w.ssl()),
            };
            let toxics = route.toxics().as_ref().clone();
            let mut old = routes.remove(name).expect("looked up above");
            old.disable();
            let instances = old.instances.len() as u32;
            // A protocol route keeps its entries in force and its recording across the move.
            let carried = old.shared.wire.clone();
            let created = self
                .create_locked(&mut routes, spec, toxics, carried)
                .and_then(|view| {
                    // The instances follow the route to its new upstream, on ports of their own again.
                    self.add_instances_locked(&mut routes, name, instances)?;
                    Ok(view)
                });
            return match created {
                Ok(view) => Ok(view),
                Err(e) => {
                    if let Some(mut new) = routes.remove(name) {
                        new.disable();
                    }
                    // Put the old route back as it was, so a refused change changes nothing.
                    if old.enable(self.settings.backlog).is_ok() && !enabled {
                        old.disable();
                    }
                    routes.insert(name.to_string(), old);
                    Err(e)
                }
            };
        }
        if enabled {
            route.enable(self.settings.backlog)?;
        } else {
            route.disable();
        }
        Ok(route.view())
    }

    /// Deletes a route: its listener closes and its connections end.
    pub fn delete(&self, name: &str) -> Result<(), TcpError> {
        let mut route = self
            .routes()
            .remove(name)
            .ok_or_else(|| TcpError::ProxyNotFound(name.to_string()))?;
        route.disable();
        Ok(())
    }

    /// Re-enables every route and removes every toxic.
    pub fn reset(&self) -> Result<(), TcpError> {
        let mut routes = self.routes();
        let mut first_error = None;
        for route in routes.values_mut() {
            route.shared.toxics.send_replace(Arc::new(Vec::new()));
            for instance in &route.instances {
                instance.shared.toxics.send_replace(Arc::new(Vec::new()));
            }
            if let Err(e) = route.enable(self.settings.backlog) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Deletes every route (faultd's shutdown).
    pub fn clear(&self) {
        let mut routes = std::mem::take(&mut *self.routes());
        for route in routes.values_mut() {
            route.disable();
        }
    }

    fn with_route<T>(
        &self,
        name: &str,
        f: impl FnOnce(&mut Route) -> Result<T, TcpError>,
    ) -> Result<T, TcpError> {
        let mut routes = self.routes();
        let route = routes
            .get_mut(name)
            .ok_or_else(|| TcpError::ProxyNotFound(name.to_string()))?;
        f(route)
    }

    /// A route's toxics, in the order they apply.
    pub fn toxics(&self, proxy: &str) -> Result<Vec<ToxicView>, TcpError> {
        self.with_route(proxy, |r| Ok(r.toxics().iter().map(Toxic::view).collect()))
    }

    /// One toxic.
    pub fn toxic(&self, proxy: &str, toxic: &str) -> Result<ToxicView, TcpError> {
        self.with_route(proxy, |r| {
            r.toxics()
                .iter()
                .find(|t| t.name == toxic)
                .map(Toxic::view)
                .ok_or_else(|| TcpError::ToxicNotFound(toxic.to_string()))
        })
    }

    /// Adds a toxic; it acts at once on open connections too.
    pub fn add_toxic(&self, proxy: &str, spec: ToxicSpec) -> Result<ToxicView, TcpError> {
        self.with_route(proxy, |r| {
            let toxic = Toxic::from_spec(spec)?;
            let mut toxics = r.toxics().as_ref().clone();
            if toxics.iter().any(|t| t.name == toxic.name) {
                return Err(TcpError::ToxicExists(toxic.name));
            }
            TcpError::at_most(toxics.len() + 1, MAX_ENTRIES, "toxics")?;
            let view = toxic.view();
            toxics.push(toxic);
            r.shared.toxics.send_replace(Arc::new(toxics));
            Ok(view)
        })
    }

    /// Changes a toxic's toxicity or attributes.
    pub fn update_toxic(
        &self,
        proxy: &str,
        toxic: &str,
        update: ToxicUpdate,
    ) -> Result<ToxicView, TcpError> {
        self.with_route(proxy, |r| {
            let mut toxics = r.toxics().as_ref().clone();
            let slot = toxics
                .iter_mut()
                .find(|t| t.name == toxic)
                .ok_or_else(|| TcpError::ToxicNotFound(toxic.to_string()))?;
            *slot = slot.updated(update)?;
            let view = slot.view();
            r.shared.toxics.send_replace(Arc::new(toxics));
            Ok(view)
        })
    }

    /// Replaces all of a route's toxics at once (the schedule's phase switch); they act at once on open
    /// connections too.
    pub fn set_toxics(&self, proxy: &str, toxics: Vec<Toxic>) -> Result<(), TcpError> {
        self.with_route(proxy, |r| {
            r.shared.toxics.send_replace(Arc::new(toxics));
            Ok(())
        })
    }

    /// Replaces all the toxics of instance `number` (from 1) of a route served by instances (the schedule's phase
    /// switch for a phase that names the instance, or the whole route).
    pub fn set_instance_toxics(
        &self,
        proxy: &str,
        number: u32,
        toxics: Vec<Toxic>,
    ) -> Result<(), TcpError> {
        self.with_route(proxy, |r| {
            let instance = number
                .checked_sub(1)
                .and_then(|i| r.instances.get(i as usize))
                .ok_or_else(|| TcpError::ProxyNotFound(format!("{proxy} instance {number}")))?;
            instance.shared.toxics.send_replace(Arc::new(toxics));
            Ok(())
        })
    }

    /// Gives route `proxy` `count` instances: listeners of their own on the route's host, each on a free port,
    /// forwarding to the route's upstream with toxics of their own. Returns their addresses, in order.
    pub fn add_instances(&self, proxy: &str, count: u32) -> Result<Vec<SocketAddr>, TcpError> {
        let mut routes = self.routes();
        self.add_instances_locked(&mut routes, proxy, count)
    }

    fn add_instances_locked(
        &self,
        routes: &mut BTreeMap<String, Route>,
        proxy: &str,
        count: u32,
    ) -> Result<Vec<SocketAddr>, TcpError> {
        let route = routes
            .get_mut(proxy)
            .ok_or_else(|| TcpError::ProxyNotFound(proxy.to_string()))?;
        let enabled = route.listening.is_some();
        for _ in 0..count {
            let shared = Arc::new(RouteShared {
                toxics: watch::channel(Arc::new(Vec::new())).0,
                kill: watch::channel(0).0,
                recorder: Arc::new(TcpRecorder::instance_of(route.shared.recorder.clone())),
                accepted: AtomicU64::new(0),
                name: route.shared.name.clone(),
                upstream: route.shared.upstream.clone(),
                allow_hosts: route.shared.allow_hosts.clone(),
                seed: route.shared.seed ^ (route.instances.len() as u64 + 1).rotate_left(17),
                deadlines: route.shared.deadlines.clone(),
                // A protocol route's instances speak it too, under the route's entries and into its recording.
                wire: route.shared.wire.clone(),
            });
            let addr = SocketAddr::new(route.listen.ip(), 0);
            let listening = bind(addr, self.settings.backlog, shared.clone())?;
            let mut instance = Route {
                shared,
                listen: listening.addr,
                listening: Some(listening),
                instances: Vec::new(),
            };
            if !enabled {
                instance.disable();
            }
            route.instances.push(instance);
        }
        Ok(route.instances.iter().map(|i| i.listen).collect())
    }

    /// Where each instance of route `proxy` listens, in order; empty for a route without instances or none.
    pub fn instance_addrs(&self, proxy: &str) -> Vec<SocketAddr> {
        self.routes()
            .get(proxy)
            .map(|r| r.instances.iter().map(|i| i.listen).collect())
            .unwrap_or_default()
    }

    /// Removes a toxic; bytes it was holding flow again.
    pub fn remove_toxic(&self, proxy: &str, toxic: &str) -> Result<(), TcpError> {
        self.with_route(proxy, |r| {
            let mut toxics = r.toxics().as_ref().clone();
            let before = toxics.len();
            toxics.retain(|t| t.name != toxic);
            if toxics.len() == before {
                return Err(TcpError::ToxicNotFound(toxic.to_string()));
            }
            r.shared.toxics.send_replace(Arc::new(toxics));
            Ok(())
        })
    }

    /// Puts a Redis route's `entries` (validated) in force, counting under `phase`; refused on a route of
    /// another protocol.
    pub fn set_redis(
        &self,
        proxy: &str,
        entries: &[super::protocol::redis::RedisEntry],
        phase: &str,
    ) -> Result<(), TcpError> {
        self.with_route(proxy, |r| match &r.shared.wire {
            Some(super::protocol::Wire::Redis(redis)) => {
                redis.set(entries, phase);
                Ok(())
            }
            _ => Err(TcpError::invalid(
                "redis",
                format!("route {proxy:?} does not speak redis (give it `protocol: redis`)"),
            )),
        })
    }

    /// Puts a postgres route's entries of `phase` in force, unless they are in force already (so the counts
    /// of `every` and `calls` run on through the phase). A route that does not speak postgres is left alone.
    pub fn set_postgres_entries(
        &self,
        proxy: &str,
        list: &[crate::behaviours::PostgresFault],
        phase: &str,
    ) -> Result<(), TcpError> {
        self.with_route(proxy, |r| {
            if let Some(Wire::Postgres(pg)) = &r.shared.wire {
                pg.set_entries_unless_same(list, phase);
            }
            Ok(())
        })
    }

    /// Connections open now on a route.
    pub fn open_connections(&self, proxy: &str) -> Result<u64, TcpError> {
        self.with_route(proxy, |r| Ok(r.shared.recorder.open()))
    }

    /// What every route recorded, by name.
    pub fn recording(&self) -> BTreeMap<String, TcpRouteRecording> {
        self.routes()
            .iter()
            .map(|(name, r)| (name.clone(), r.recording()))
            .collect()
    }
}
