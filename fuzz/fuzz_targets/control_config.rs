//! Fuzzes faultd's `PUT /config` body: `Config::from_json` (parse and validate) and, for a body it accepts, reading
//! its files as a control API without `--files` does (none; gRPC error details of the built-in `google.rpc` types are
//! encoded from their JSON) and compiling it into the live plan of a running faultd (`Faultd::replace_config`), as
//! the control API does. Neither
//! may panic; a refused body must get an error that says what is wrong.
//!
//! Not for the data plane: the faultd here is never called.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

fn faultd() -> &'static faultd::Faultd {
    static FAULTD: OnceLock<(tokio::runtime::Runtime, faultd::Faultd)> = OnceLock::new();
    let (_, f) = FAULTD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let config = faultd::Config::from_yaml(
            "routes:\n  pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }\n",
            "seed.yaml",
        )
        .expect("the seed configuration is valid");
        let f = runtime
            .block_on(faultd::start(config, faultd::Options::default()))
            .expect("faultd starts on loopback");
        (runtime, f)
    });
    f
}

fuzz_target!(|data: &[u8]| {
    match faultd::Config::from_json(data, "control API body") {
        Ok(mut config) => {
            if let Err(e) = config.read_files(&faultd::Files::Refused) {
                assert!(!e.message.is_empty(), "an error that says nothing: {e:?}");
                return;
            }
            if let Err(e) = faultd().replace_config(config) {
                assert!(!e.to_string().is_empty(), "an empty error");
            }
        }
        Err(e) => assert!(!e.message.is_empty(), "an error that says nothing: {e:?}"),
    }
});
