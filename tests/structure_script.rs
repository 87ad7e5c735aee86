//! `scripts/structure.py`, the check CI runs on the crates' shape, run on small workspaces written here: each rule
//! must catch what it is for, and pass what it allows (a folder's own children, test code).

use std::path::Path;
use std::process::Command;

use crate::hardening::Scratch;

/// Writes `files` (path, text) under a fresh workspace whose only member is crate `a`, runs the script on it, and
/// returns its exit code with what it printed.
fn check(name: &str, files: &[(String, String)]) -> (i32, String) {
    let scratch = Scratch::new(name);
    scratch.write("Cargo.toml", "[workspace]\nmembers = [\"a\"]\n");
    for (path, text) in files {
        let path = scratch.path(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/structure.py");
    let out = Command::new("python3")
        .arg(script)
        .arg("--root")
        .arg(scratch.path(""))
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3: {e} (apt-get install -y python3)"));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn file(path: &str, text: &str) -> (String, String) {
    (path.to_string(), text.to_string())
}

#[test]
fn two_files_that_use_each_other_are_a_cycle() {
    let (code, text) = check(
        "structure-cycle",
        &[
            file("a/src/lib.rs", "mod x;\nmod y;\n"),
            file("a/src/x.rs", "use crate::y::Y;\npub struct X(Y);\n"),
            file(
                "a/src/y.rs",
                "pub struct Y;\npub fn f(_: &crate::x::X) {}\n",
            ),
        ],
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("a/src: a cycle among x, y (x -> y; y -> x)"),
        "{text}"
    );
}

#[test]
fn a_folder_may_use_its_children_and_they_it_and_tests_do_not_count() {
    let (code, text) = check(
        "structure-allowed",
        &[
            file("a/src/lib.rs", "mod t;\nmod x;\nmod y;\npub use t::T;\n"),
            file("a/src/t/mod.rs", "mod leaf;\npub use leaf::Leaf;\npub struct T;\n"),
            file("a/src/t/leaf.rs", "use super::T;\npub struct Leaf(T);\n"),
            // `x` uses `y`; `y` names `x` only in a string, a comment and a test.
            file("a/src/x.rs", "use crate::y::Y;\npub struct X(Y);\n"),
            file(
                "a/src/y.rs",
                "pub struct Y;\n// crate::x::X is not used here\nconst S: &str = \"crate::x::X\";\n#[cfg(test)]\nmod tests {\n    use crate::x::X;\n}\n",
            ),
        ],
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("no cycle"), "{text}");
}

#[test]
fn a_long_file_and_a_long_function_are_named_with_their_lengths() {
    let body = "    let _ = 1;\n".repeat(160);
    let long_fn = format!("pub fn long() {{\n{body}}}\n");
    let filler = "// a line\n".repeat(701);
    let (code, text) = check(
        "structure-long",
        &[
            file("a/src/lib.rs", "mod f;\nmod g;\n"),
            file("a/src/f.rs", &long_fn),
            file("a/src/g.rs", &filler),
        ],
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("a/src/f.rs:1: fn long is 162 lines (at most 150)"),
        "{text}"
    );
    assert!(
        text.contains("a/src/g.rs: 701 lines (at most 700)"),
        "{text}"
    );
    assert!(!text.contains("a/src/lib.rs"), "{text}");
}
