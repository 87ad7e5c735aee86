//! The `demo` binary's contract: `--help` with examples, exit code 2 with a clear message on bad flags or config.

use std::process::Command;

fn demo(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_demo"))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn help_shows_examples_and_every_mistake() {
    let (code, text) = demo(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        text.contains("Examples:") && text.contains("--instances 60 --shared-counters"),
        "{text}"
    );
    for m in demo::Mistake::ALL {
        assert!(text.contains(m.name()), "{}", m.name());
    }
}

#[test]
fn bad_flags_exit_2_with_a_message() {
    let cases: [&[&str]; 4] = [
        &["--mistake", "no_breaker"],
        &["--listen", "not-an-address"],
        &["--instances", "0", "--print-config"],
        &["--dependency", "ftp://127.0.0.1:9000"],
    ];
    for args in cases {
        let (code, text) = demo(args);
        assert_eq!(code, 2, "{args:?}: {text}");
        assert!(!text.trim().is_empty(), "{args:?}");
    }
}

#[test]
fn a_bad_config_file_exits_2_naming_the_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("demo-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(&file, "operations:\n  pricing: { timeout: 5 sec }\n").unwrap();
    let (code, text) = demo(&["--config", file.to_str().unwrap(), "--print-config"]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("bad.yaml") && text.contains("line 2") && text.contains("5 sec"),
        "{text}"
    );
    let (code, text) = demo(&["--config", dir.join("missing.yaml").to_str().unwrap()]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("missing.yaml"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn print_config_shows_the_effective_configuration_with_flags_applied() {
    let (code, text) = demo(&[
        "--instances",
        "3",
        "--mistake",
        "bare_count,no_min_calls",
        "--time-scale",
        "0.1",
        "--print-config",
    ]);
    assert_eq!(code, 0, "{text}");
    let config = demo::DemoConfig::from_yaml(&text, "printed").unwrap();
    assert_eq!(config.instances, 3);
    assert!(config.has(demo::Mistake::BareCount) && config.has(demo::Mistake::NoMinCalls));
    assert_eq!(
        config.operations.pricing.unwrap().timeout,
        faultline_units::Dur::from_millis(25)
    );
}
