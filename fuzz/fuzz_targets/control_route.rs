//! Fuzzes faultd's `PUT /routes/{name}` body: parsed as the control API parses it (`control::parse_json`) and,
//! when it parses, laid over a route of a running faultd (`Faultd::set_route`, which validates it against the
//! route). Neither may panic; a refused body must get an error that says what is wrong.
//!
//! Not for the data plane: the faultd here is never called.

#![no_main]

use std::sync::OnceLock;

use faultd::PhaseRoute;
use libfuzzer_sys::fuzz_target;

fn faultd() -> &'static faultd::Faultd {
    static FAULTD: OnceLock<(tokio::runtime::Runtime, faultd::Faultd)> = OnceLock::new();
    let (_, f) = FAULTD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let config = faultd::Config::from_yaml(
            "routes:\n  pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }\n\
             phases:\n  - { name: healthy, at: 0s }\n  - { name: brownout, at: 1s, routes: { pricing: { latency: { fixed: 2s } } } }\n",
            "seed.yaml",
        )
        .expect("the seed configuration is valid");
        let f = runtime
            .block_on(faultd::start(config, faultd::Options::default()))
            .expect("faultd starts on loopback");
        f.start_schedule(tokio::time::Instant::now());
        (runtime, f)
    });
    f
}

fuzz_target!(|data: &[u8]| {
    match faultd::control::parse_json::<PhaseRoute>(data) {
        Ok(set) => {
            if let Err(e) = faultd().set_route("pricing", &set) {
                assert!(!e.to_string().is_empty(), "an empty error");
            }
        }
        Err((_field, message)) => assert!(!message.is_empty(), "an error that says nothing"),
    }
});
