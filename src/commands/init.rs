//! `faultline init`: writes a commented first scenario for a service faultline did not build, from what a user
//! knows of it (how it starts or where it runs, how it finds its dependency, what to call, how its breaker shows),
//! and validates it before saying it is written. Not where scenarios are checked: `Scenario::parse_in` does that.

use std::path::Path;

/// What `faultline init` knows of the service: its flags.
#[derive(Debug, Clone, Default, clap::Args)]
#[group(skip)]
pub struct InitOptions {
    /// The command line that starts the service (split as a shell would); {sut.port} in it is the free port
    /// the run picks, otherwise the port goes in the variable --port-env names.
    #[arg(long, value_name = "CMD")]
    pub command: Option<String>,
    /// The URL of a service that is already running.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The environment variable through which the service finds its dependency's base URL.
    #[arg(long, value_name = "NAME", default_value = "DEPENDENCY_URL")]
    pub dependency_env: String,
    /// The environment variable the service reads its port from (with --command).
    #[arg(long, value_name = "NAME", default_value = "PORT")]
    pub port_env: String,
    /// With --url: the address faultd listens on, which the service was started with [default: 127.0.0.1:9000].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The path pattern of the dependency's calls, e.g. /price/*.
    #[arg(long, value_name = "PATTERN", default_value = "/**")]
    pub dependency_path: String,
    /// The path the load GETs: a request that makes the service call its dependency.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/",
        conflicts_with = "grpc"
    )]
    pub get: String,
    /// Call this gRPC method instead, e.g. shop.Prices/Get.
    #[arg(long, value_name = "SERVICE/METHOD")]
    pub grpc: Option<String>,
    /// The gRPC request message, protobuf bytes as hex (default: every field at its default).
    #[arg(long, value_name = "HEX", default_value = "", requires = "grpc")]
    pub message: String,
    /// The .proto file that defines the gRPC method (repeat for several): the request is then written as JSON
    /// against it, and the report decodes the answers.
    #[arg(
        long,
        value_name = "FILE",
        requires = "grpc",
        conflicts_with = "message"
    )]
    pub proto: Vec<String>,
    /// The gauge through which the service exports its breaker's state (0 closed, 1 open, 2 half-open);
    /// without it the breaker is inferred from the traffic at faultd.
    #[arg(long, value_name = "NAME")]
    pub breaker_metric: Option<String>,
    /// Where that gauge is served, when not at the service's URL + /metrics.
    #[arg(long, value_name = "URL", requires = "breaker_metric")]
    pub metrics_url: Option<String>,
    /// The scenario's name (default: the command's program, or my-service).
    #[arg(long)]
    pub name: Option<String>,
}

/// `file` (relative to the working folder, or absolute) as named from `dir`: `../protos/shop.proto` for a
/// scenario written into another folder. Absolute when the two share nothing but the root.
fn relative_to(dir: &Path, file: &Path) -> std::path::PathBuf {
    let absolute = |p: &Path| {
        let p = std::env::current_dir().map_or(p.to_path_buf(), |cwd| cwd.join(p));
        p.canonicalize().unwrap_or(p)
    };
    let (dir, file) = (absolute(dir), absolute(file));
    let common = dir
        .components()
        .zip(file.components())
        .take_while(|(a, b)| a == b)
        .count();
    if common <= 1 {
        return file;
    }
    let mut out = std::path::PathBuf::new();
    for _ in dir.components().skip(common) {
        out.push("..");
    }
    out.extend(file.components().skip(common));
    out
}

/// Writes the scenario to `out` (stdout when `None`; an existing file only with `force`) after validating it.
/// Exit 0, or 2 with the reason.
pub fn init(options: &InitOptions, out: Option<&Path>, force: bool) -> i32 {
    // `-o -` is standard output, as is no -o.
    let out = out.filter(|p| *p != Path::new(faultline_units::input::STDIN));
    // A scenario names its .proto files relative to its own folder; the flags name them from here.
    let mut options = options.clone();
    if let Some(dir) = out
        .and_then(Path::parent)
        .filter(|p| !p.as_os_str().is_empty())
    {
        for file in &mut options.proto {
            *file = relative_to(dir, Path::new(file)).display().to_string();
        }
    }
    let options = &options;
    let text = match scenario(options) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    super::written::deliver(&text, out, force, "<faultline init>", "these flags make")
}

/// The scenario's text for `o`, or what is wrong with the flags.
pub fn scenario(o: &InitOptions) -> Result<String, String> {
    let Checked {
        command,
        grpc,
        listen,
        name,
    } = check(o)?;
    let mut y = String::new();
    let q = quoted;
    y.push_str(&format!(
        "# A first scenario for {name}, written by `faultline init`. Check it with `faultline validate FILE`, run it\n\
         # with `faultline run FILE`. Every field: docs/scenario-format.md; from zero to a verdict for a service\n\
         # faultline did not build: docs/your-service.md.\n\
         name: {}\n\
         description: >\n  \
           {name}'s dependency fails every call for 10 s: its breaker must open within 5 s, the service must keep\n  \
           answering fast, and the breaker must close within 10 s of the recovery.\n\
         duration: 30s\n\
         seed: 1\n\n",
        q(&name)
    ));

    dependency(&mut y, o, listen);
    sut(&mut y, o, command.as_deref());
    load(&mut y, o, grpc.as_deref());
    breakers(&mut y, o);
    y.push_str(
        "expect:\n  \
         # Opens once it has seen enough failures: a few seconds at 20 calls a second for most breaker libraries.\n  \
         - { id: opens, breaker: dependency, opens_within: 5s, after: failing }\n  \
         # While the dependency fails, the service answers from its fallback or with an error at once, never hangs.\n  \
         - { id: fast-while-failing, sut_latency: p99, below: 1s, during: failing }\n  \
         # Closes once a trial call succeeds after the recovery: its open state's wait, plus one call.\n  \
         - { id: closes, breaker: dependency, closes_within: 10s, after: recovered }\n",
    );
    Ok(y)
}

/// What the flags say once checked: the command split into words, the gRPC path, faultd's address, the name.
struct Checked<'a> {
    command: Option<Vec<String>>,
    grpc: Option<String>,
    listen: &'a str,
    name: String,
}

/// The flags checked together: one way to reach the service, names that are environment variables, a gRPC
/// request that has its method, metrics that have their gauge.
fn check(o: &InitOptions) -> Result<Checked<'_>, String> {
    let command = match &o.command {
        Some(c) => {
            let words = shlex::split(c)
                .filter(|w| !w.is_empty())
                .ok_or_else(|| format!("--command {c:?}: an unclosed quote, or nothing to run"))?;
            Some(words)
        }
        None => None,
    };
    if command.is_some() == o.url.is_some() {
        return Err("give the service as --command \"...\" (faultline starts it) or --url URL (it is already running)".into());
    }
    if command.is_some() && o.listen.is_some() {
        return Err("--listen places faultd for a service that is already running (--url); a service faultline \
                    starts is told faultd's address through {faultd.url}"
            .into());
    }
    let listen = o.listen.as_deref().unwrap_or("127.0.0.1:9000");
    for (flag, name) in [
        ("--dependency-env", &o.dependency_env),
        ("--port-env", &o.port_env),
    ] {
        if name.is_empty()
            || name.starts_with(|c: char| c.is_ascii_digit())
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "{flag} {name:?}: an environment variable's name is letters, digits and _, not starting with a digit"
            ));
        }
    }
    let grpc = match &o.grpc {
        Some(g) => Some(grpc_path(g)?),
        None => None,
    };
    if grpc.is_none() && !o.message.is_empty() {
        return Err(
            "--message is the request of a gRPC call: give --grpc SERVICE/METHOD too".into(),
        );
    }
    if !o.message.len().is_multiple_of(2) || !o.message.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!(
            "--message {:?}: protobuf bytes as hex, two digits a byte (e.g. 0a023432)",
            o.message
        ));
    }
    if grpc.is_some() && o.breaker_metric.is_some() && o.metrics_url.is_none() {
        return Err(
            "a gRPC service serves its Prometheus metrics on a port of its own: give --metrics-url \
             (e.g. http://127.0.0.1:9464/metrics) with --breaker-metric"
                .into(),
        );
    }
    if o.metrics_url.is_some() && o.breaker_metric.is_none() {
        return Err(
            "--metrics-url says where --breaker-metric is served: give --breaker-metric NAME too"
                .into(),
        );
    }
    let name = o
        .name
        .clone()
        .or_else(|| {
            let program = command.as_ref()?.iter().find(|w| !is_interpreter(w))?;
            Path::new(program)
                .file_stem()
                .map(|s| s.to_string_lossy().to_string())
        })
        .unwrap_or_else(|| "my-service".to_string());

    Ok(Checked {
        command,
        grpc,
        listen,
        name,
    })
}

/// The dependency: faultd's routes and the schedule of faults (and, for a running service, where faultd listens).
fn dependency(y: &mut String, o: &InitOptions, listen: &str) {
    let q = quoted;
    y.push_str("# faultd stands in for the dependency: the calls the service makes to it (routes) and a schedule of faults.\ndependency:\n");
    if o.url.is_some() {
        y.push_str(&format!(
            "  # The service is already running: it must have been started with {}=http://{} (or however it\n  \
             # reads its dependency's URL) for its calls to reach faultd here.\n  \
             listen: {}\n",
            o.dependency_env,
            listen,
            q(listen)
        ));
    }
    y.push_str(&format!(
        "  routes:\n    \
           # The dependency's paths. Narrow the pattern to the calls this scenario is about (e.g. /price/*), one route\n    \
           # per kind of call; a call that matches no route is answered 404 and reported at the end of the run.\n    \
           dependency: {{ path: {}, latency: {{ p50: 5ms, p99: 20ms }} }}\n  \
         phases:\n    \
           - {{ name: healthy,   at: 0s }}\n    \
           # Every call fails. For a slow dependency instead: {{ latency: {{ fixed: 2s }} }}, past the service's timeout.\n    \
           - {{ name: failing,   at: 10s, routes: {{ dependency: {{ errors: [ {{ share: 100%, status: 503 }} ] }} }} }}\n    \
           - {{ name: recovered, at: 20s, routes: {{ dependency: healthy }} }}\n\n",
        q(&o.dependency_path)
    ));
}

/// The service under test: the command the run starts, or the URL of the one already running.
fn sut(y: &mut String, o: &InitOptions, command: Option<&[String]>) {
    let q = quoted;
    match (command, &o.url) {
        (Some(words), _) => {
            let args: Vec<String> = words.iter().map(|w| q(w)).collect();
            y.push_str("# The service under test: started by the run, stopped after it.\nsut:\n");
            y.push_str(&format!("  command: [ {} ]\n  env:\n", args.join(", ")));
            if !words.iter().any(|w| w.contains("{sut.port}")) {
                y.push_str(&format!(
                    "    {}: \"{{sut.port}}\"    # the port it listens on: a free one the run picks\n",
                    o.port_env
                ));
            }
            y.push_str(&format!(
                "    {}: \"{{faultd.url}}\"    # where it finds its dependency: faultd's base URL\n  \
                 url: http://127.0.0.1:{{sut.port}}\n  \
                 # Ready once its port accepts a connection; or {{ http: /health }}, {{ grpc: SERVICE }}, {{ log: REGEX }}.\n  \
                 ready: {{ tcp: true }}\n  \
                 ready_timeout: 30s\n\n",
                o.dependency_env
            ));
        }
        (None, Some(url)) => {
            y.push_str(&format!(
                "# The service under test, already running.\nsut:\n  url: {}\n\n",
                q(url)
            ));
        }
        (None, None) => {}
    }
}

/// The load: its rate and the one request, HTTP or gRPC.
fn load(y: &mut String, o: &InitOptions, grpc: Option<&str>) {
    let q = quoted;
    y.push_str("# The load: an open model, sent at this rate whatever the service's speed.\nload:\n  rate: 20/s\n  timeout: 5s\n  requests:\n");
    match grpc {
        Some(path) if !o.proto.is_empty() => y.push_str(&format!(
            "    - grpc: {}\n      \
                 proto: [ {} ]\n      \
                 message: {{ json: {{}} }}    # the request, as JSON against the .proto; {{}} leaves every field at its default\n\n",
            q(path),
            o.proto.iter().map(|f| q(f)).collect::<Vec<_>>().join(", ")
        )),
        Some(path) => y.push_str(&format!(
            "    - grpc: {}\n      \
                 message: {}    # the request: protobuf bytes as hex; \"\" leaves every field at its default\n\n",
            q(path),
            q(&o.message)
        )),
        None => y.push_str(&format!(
            "    - get: {}    # a request that makes the service call its dependency\n\n",
            q(&o.get)
        )),
    }
}

/// How the run sees the breaker: its gauge when named, else inferred from the traffic.
fn breakers(y: &mut String, o: &InitOptions) {
    let q = quoted;
    y.push_str("# How the run sees the service's breaker.\nbreakers:\n  dependency:\n");
    match &o.breaker_metric {
        Some(metric) => {
            let place = match &o.metrics_url {
                Some(u) => format!("url: {}", q(u)),
                None => "path: /metrics".to_string(),
            };
            y.push_str(&format!(
                "    # Its gauge, scraped every 100 ms; add `labels: {{ name: ... }}` when it exports one series per breaker.\n    \
                 metrics: {{ {place}, metric: {}, values: {{ closed: 0, open: 1, half_open: 2 }}, interval: 100ms }}\n\n",
                q(metric)
            ));
        }
        None => y.push_str(
            "    # Read from the traffic at faultd: calls stop arriving while the breaker is open. A breaker that exports its\n    \
             # state is watched more precisely: `faultline init --breaker-metric NAME`, or see docs/your-service.md.\n    \
             inferred: true\n\n",
        ),
    }
}

/// `SERVICE/METHOD` (a leading `/` allowed) as the gRPC path `/SERVICE/METHOD`.
fn grpc_path(g: &str) -> Result<String, String> {
    let bare = g.strip_prefix('/').unwrap_or(g);
    match bare.split_once('/') {
        Some((service, method))
            if !service.is_empty()
                && !method.is_empty()
                && !method.contains('/')
                && !bare.contains(char::is_whitespace) =>
        {
            Ok(format!("/{bare}"))
        }
        _ => Err(format!(
            "--grpc {g:?}: give the full service name and the method, e.g. shop.Prices/Get"
        )),
    }
}

/// A program that runs the service rather than being it: its name is not the service's.
fn is_interpreter(word: &str) -> bool {
    let program = Path::new(word)
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    word.starts_with('-')
        || word.starts_with('$')
        || [
            "python", "python3", "node", "java", "ruby", "go", "dotnet", "npm", "npx", "env", "uv",
            "deno", "bun",
        ]
        .contains(&program.as_str())
        || program.starts_with("python3.")
}

/// `s` as a YAML scalar: a JSON string, which YAML reads as a double-quoted one.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Overrides, Scenario};

    fn options() -> InitOptions {
        InitOptions {
            dependency_env: "PRICING_URL".into(),
            port_env: "PORT".into(),
            dependency_path: "/**".into(),
            get: "/".into(),
            ..InitOptions::default()
        }
    }

    fn valid(o: &InitOptions) -> crate::scenario::Validated {
        let text = scenario(o).unwrap();
        Scenario::parse(&text, "init.yaml", &Overrides::default())
            .unwrap_or_else(|e| panic!("{}\n{text}", e.render()))
    }

    #[test]
    fn every_kind_of_service_gets_a_scenario_that_validates_as_written() {
        let command = InitOptions {
            command: Some("python3 'my app/server.py' --verbose".into()),
            ..options()
        };
        let v = valid(&command);
        assert_eq!(v.scenario.name, "server");
        assert_eq!(
            v.scenario.sut.command.as_deref().unwrap(),
            ["python3", "my app/server.py", "--verbose"]
        );
        assert_eq!(v.scenario.sut.env["PORT"], "{sut.port}");
        assert_eq!(v.scenario.sut.env["PRICING_URL"], "{faultd.url}");
        assert_eq!(v.expectations.len(), 3);
        assert!(scenario(&command).unwrap().contains("inferred: true"));

        // The port in the command itself: no variable for it.
        let v = valid(&InitOptions {
            command: Some("./prices --port {sut.port}".into()),
            grpc: Some("shop.Prices/Get".into()),
            message: "0a023432".into(),
            name: Some("prices".into()),
            ..options()
        });
        assert!(!v.scenario.sut.env.contains_key("PORT"));
        let text = scenario(&InitOptions {
            command: Some("./prices --port {sut.port}".into()),
            grpc: Some("/shop.Prices/Get".into()),
            ..options()
        })
        .unwrap();
        assert!(text.contains("- grpc: \"/shop.Prices/Get\""), "{text}");
        assert!(text.contains("message: \"\""), "{text}");

        // With its .proto: the request as JSON against it, checked as the run will check it.
        let catalog = InitOptions {
            command: Some("./catalog --port {sut.port}".into()),
            grpc: Some("shop.Catalog/GetProduct".into()),
            proto: vec!["tests/services/python_grpc/catalog.proto".into()],
            ..options()
        };
        let v = valid(&catalog);
        assert!(v.scenario.load.requests[0]
            .message
            .as_ref()
            .and_then(|m| m.json())
            .is_some());
        let text = scenario(&catalog).unwrap();
        assert!(
            text.contains("proto: [ \"tests/services/python_grpc/catalog.proto\" ]"),
            "{text}"
        );
        let wrong = scenario(&InitOptions {
            grpc: Some("shop.Catalog/Get".into()),
            ..catalog.clone()
        })
        .unwrap();
        let e = Scenario::parse(&wrong, "init.yaml", &Overrides::default())
            .unwrap_err()
            .render();
        assert!(
            e.contains("has no method Get (its methods: GetProduct)"),
            "{e}"
        );
        assert_eq!(
            relative_to(
                Path::new("tests/services"),
                Path::new("scenarios/retry-storm.yaml")
            ),
            Path::new("../../scenarios/retry-storm.yaml")
        );

        // Already running: faultd where the service was told to call, the breaker by its gauge.
        let running = InitOptions {
            url: Some("http://127.0.0.1:8080".into()),
            listen: Some("127.0.0.1:9100".into()),
            get: "/quote/1".into(),
            dependency_path: "/price/*".into(),
            breaker_metric: Some("pricing_breaker_state".into()),
            ..options()
        };
        let v = valid(&running);
        assert_eq!(v.scenario.name, "my-service");
        assert_eq!(
            v.scenario.dependency.listen.as_deref(),
            Some("127.0.0.1:9100")
        );
        assert_eq!(v.scenario.dependency.routes["dependency"].path, "/price/*");
        let text = scenario(&running).unwrap();
        assert!(
            text.contains("started with PRICING_URL=http://127.0.0.1:9100"),
            "{text}"
        );
        assert!(text.contains("metric: \"pricing_breaker_state\""), "{text}");

        // A gRPC service's gauge, on its own port.
        valid(&InitOptions {
            command: Some("./prices".into()),
            grpc: Some("shop.Prices/Get".into()),
            breaker_metric: Some("breaker_state".into()),
            metrics_url: Some("http://127.0.0.1:9464/metrics".into()),
            ..options()
        });
    }

    #[test]
    fn flags_that_cannot_make_a_scenario_are_refused_with_what_to_give() {
        let refused = |o: InitOptions, words: &str| {
            let e = scenario(&o).unwrap_err();
            assert!(e.contains(words), "{e}");
        };
        refused(options(), "--command");
        refused(
            InitOptions {
                command: Some("a".into()),
                url: Some("http://127.0.0.1:1".into()),
                ..options()
            },
            "--url URL",
        );
        refused(
            InitOptions {
                command: Some("a".into()),
                listen: Some("127.0.0.1:9000".into()),
                ..options()
            },
            "{faultd.url}",
        );
        refused(
            InitOptions {
                command: Some("python3 'app.py".into()),
                ..options()
            },
            "unclosed quote",
        );
        refused(
            InitOptions {
                command: Some("a".into()),
                dependency_env: "PRICING-URL".into(),
                ..options()
            },
            "--dependency-env",
        );
        refused(
            InitOptions {
                command: Some("a".into()),
                grpc: Some("Get".into()),
                ..options()
            },
            "shop.Prices/Get",
        );
        refused(
            InitOptions {
                command: Some("a".into()),
                grpc: Some("shop.Prices/Get".into()),
                message: "0a0".into(),
                ..options()
            },
            "two digits a byte",
        );
        refused(
            InitOptions {
                command: Some("a".into()),
                grpc: Some("shop.Prices/Get".into()),
                breaker_metric: Some("state".into()),
                ..options()
            },
            "--metrics-url",
        );
    }
}
