//! The files a configuration names (a gRPC answer's `message_file`): the control API reads none without
//! `--files DIR` and only regular files inside DIR with it, never blocking on a FIFO nor reading a device; a
//! `--config` file names files beside it under the same rules.

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{call, get, http2, Reply};
use faultd::{Config, Options};

/// A fresh folder of its own under the system's temporary folder.
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("faultd-files-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only reads it.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {path:?}"
    );
}

/// A faultd with a plain HTTP route and a gRPC route, its control API on, reading files inside `files` if given.
async fn start(files: Option<&Path>) -> faultd::Faultd {
    let config = Config::from_yaml(
        "routes:\n  pricing: { path: /price/* }\n  catalog: { path: /shop.Catalog/GetProduct, grpc_response: { message: '08' } }\n",
        "files.yaml",
    )
    .unwrap();
    let options = Options {
        control: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        files: files.map(Path::to_path_buf),
        ..Options::default()
    };
    faultd::start(config, options).await.unwrap()
}

/// The configuration of [`start`] with the gRPC route's message in `file`.
fn config_naming(file: &str) -> Vec<u8> {
    serde_json::json!({
        "routes": {
            "pricing": { "path": "/price/*" },
            "catalog": { "path": "/shop.Catalog/GetProduct", "grpc_response": { "message_file": file } },
        }
    })
    .to_string()
    .into_bytes()
}

/// `PUT /config` naming `file`, answered within 5 s (a blocked reader would never answer).
async fn put_config_naming(f: &faultd::Faultd, file: &str) -> Reply {
    let control = f.control_addr().unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        call(control, "PUT", "/config", &[], &config_naming(file)),
    )
    .await
    .unwrap_or_else(|_| panic!("PUT /config naming {file:?} got no answer within 5 s"))
}

fn problem(reply: &Reply) -> (String, String) {
    assert_eq!(
        reply.status(),
        Some(400),
        "{:?}",
        String::from_utf8_lossy(reply.body())
    );
    let v: serde_json::Value = serde_json::from_slice(reply.body()).unwrap();
    (
        v["field"].as_str().unwrap_or_default().to_string(),
        v["error"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_named_through_the_control_api_is_refused_at_once_and_faultd_keeps_answering() {
    let dir = folder("fifo");
    mkfifo(&dir.join("pipe"));
    let f = start(Some(&dir)).await;
    let (field, error) = problem(&put_config_naming(&f, "pipe").await);
    assert_eq!(field, "routes.catalog.grpc_response.message_file");
    assert!(error.contains("FIFO") && error.contains("pipe"), "{error}");
    // Both planes still answer, each within its deadline.
    let data = tokio::time::timeout(Duration::from_secs(5), get(f.data_addr(), "/price/1")).await;
    assert_eq!(data.expect("the data plane answers").status(), Some(200));
    let control = tokio::time::timeout(
        Duration::from_secs(5),
        get(f.control_addr().unwrap(), "/schedule"),
    )
    .await;
    assert_eq!(
        control.expect("the control API answers").status(),
        Some(200)
    );
    f.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_zero_is_refused_as_a_device_not_read() {
    let f = start(Some(Path::new("/dev"))).await;
    let (field, error) = problem(&put_config_naming(&f, "zero").await);
    assert_eq!(field, "routes.catalog.grpc_response.message_file");
    assert!(error.contains("a device, not a regular file"), "{error}");
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_that_lead_out_of_the_files_folder_are_refused() {
    let dir = folder("out");
    let outside = folder("outside");
    std::fs::write(outside.join("secret.bin"), b"\x0a\x01s").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.bin"), dir.join("link.bin")).unwrap();
    let f = start(Some(&dir)).await;
    let escape = format!(
        "../{}/secret.bin",
        outside.file_name().unwrap().to_str().unwrap()
    );
    let absolute = outside.join("secret.bin").display().to_string();
    for written in [escape.as_str(), absolute.as_str(), "link.bin"] {
        let (field, error) = problem(&put_config_naming(&f, written).await);
        assert_eq!(
            field, "routes.catalog.grpc_response.message_file",
            "{written}"
        );
        assert!(
            error.contains("outside the --files folder"),
            "{written}: {error}"
        );
    }
    f.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&outside).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regular_file_inside_the_files_folder_is_read_and_served() {
    let dir = folder("served");
    std::fs::write(dir.join("product.bin"), b"\x0a\x03abc").unwrap();
    let f = start(Some(&dir)).await;
    assert_eq!(
        put_config_naming(&f, "product.bin").await.status(),
        Some(204)
    );
    let client = http2::connect(f.data_addr()).await;
    let answer = http2::exchange(
        &client,
        http2::grpc(f.data_addr(), "/shop.Catalog/GetProduct", None),
        &http2::framed(b""),
    )
    .await
    .unwrap();
    assert_eq!(answer.grpc_status(), Some("0"));
    assert_eq!(answer.body, http2::framed(b"\x0a\x03abc"));
    f.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_files_the_control_api_refuses_any_message_file_naming_the_field_and_the_flag() {
    let dir = folder("none");
    std::fs::write(dir.join("product.bin"), b"\x08\x01").unwrap();
    let f = start(None).await;
    let path = dir.join("product.bin").display().to_string();
    let (field, error) = problem(&put_config_naming(&f, &path).await);
    assert_eq!(field, "routes.catalog.grpc_response.message_file");
    assert!(
        error.contains("--files") && error.contains("`message`"),
        "{error}"
    );
    let body = serde_json::json!({ "grpc_response": { "message_file": path } }).to_string();
    let reply = call(
        f.control_addr().unwrap(),
        "PUT",
        "/routes/catalog",
        &[],
        body.as_bytes(),
    )
    .await;
    let (field, error) = problem(&reply);
    assert_eq!(field, "routes.catalog.grpc_response.message_file");
    assert!(error.contains("--files"), "{error}");
    f.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_over_the_cap_is_refused_naming_the_cap() {
    let dir = folder("cap");
    std::fs::write(dir.join("big.bin"), vec![0u8; faultd::files::MAX_FILE + 1]).unwrap();
    let f = start(Some(&dir)).await;
    let (field, error) = problem(&put_config_naming(&f, "big.bin").await);
    assert_eq!(field, "routes.catalog.grpc_response.message_file");
    assert!(
        error.contains("file too large") && error.contains("body limit"),
        "{error}"
    );
    f.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs the faultd binary with `args`, waiting at most 10 s for it to exit; kills it and fails if it does not.
fn run_faultd(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_faultd"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return (status.code(), err);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("faultd {args:?} did not exit within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_fifo_named_in_a_config_file_stops_faultd_at_start_with_exit_2() {
    let dir = folder("config-fifo");
    mkfifo(&dir.join("pipe"));
    let config = dir.join("faultd.yaml");
    std::fs::write(
        &config,
        "routes:\n  catalog: { path: /shop.Catalog/GetProduct, grpc_response: { message_file: pipe } }\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let (code, err) = run_faultd(&["--config", &config, "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("routes.catalog.grpc_response.message_file") && err.contains("FIFO"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_config_file_names_files_beside_it() {
    let dir = folder("config-beside");
    std::fs::write(dir.join("product.bin"), b"\x08\x01").unwrap();
    let config = dir.join("faultd.yaml");
    std::fs::write(
        &config,
        "routes:\n  catalog: { path: /shop.Catalog/GetProduct, grpc_response: { message_file: product.bin } }\n",
    )
    .unwrap();
    // Run from elsewhere: the file is found beside the configuration, not in the working folder.
    let (code, err) = run_faultd(&["validate", &config.display().to_string()]);
    assert_eq!(code, Some(0), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
