//! The docs tell the truth about the code: every relative link and every repository path written in README.md,
//! docs/ and the other Markdown a reader meets exists (a link's `#anchor` among the headings of the file it points
//! at); every YAML example is accepted by what reads it (a scenario fragment laid over a minimal scenario, the
//! demo's configuration, faultd's, the action's inputs); and every command line of faultline, faultd, loadgen and
//! the demo, in the docs and in the binaries' own `--help` examples, parses: it is run with `--help` appended, which
//! clap answers only once every argument before it has been read and its value checked. The completion scripts and
//! man pages `faultline completions` and `faultline man` generate from the same definition are checked here too.
//!
//! Not for prose: what a sentence claims about behaviour is the business of the test that proves the behaviour.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use faultline::scenario::{Overrides, Scenario};
use serde_json::Value;

use crate::hardening::bin;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Folders a reader does not read: build output, installed packages, fuzzing corpora, reports.
const NOT_DOCS: &[&str] = &["target", "node_modules", ".venv", ".git", "fuzz", "reports"];

/// Every Markdown file of the repository outside [`NOT_DOCS`], relative to the root.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = rel.join(&name);
            if e.file_type().unwrap().is_dir() {
                if !NOT_DOCS.contains(&name.as_str()) {
                    walk(&e.path(), &path, out);
                }
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), Path::new(""), &mut out);
    assert!(out.iter().any(|p| p == Path::new("README.md")), "{out:?}");
    assert!(out.len() >= 15, "too few Markdown files found: {out:?}");
    out
}

/// A fenced block: the file, the line of its opening fence, its info string and its text (dedented to the fence).
struct Block {
    file: PathBuf,
    line: usize,
    lang: String,
    text: String,
}

/// The text outside fenced blocks (blocks blanked, so that line numbers hold) and the blocks.
fn split(file: &Path, text: &str) -> (String, Vec<Block>) {
    let mut prose = String::new();
    let mut blocks = Vec::new();
    let mut open: Option<(usize, usize, String, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match open.as_mut() {
            None if trimmed.starts_with("```") => {
                open = Some((
                    i + 1,
                    indent,
                    trimmed[3..].trim().to_string(),
                    String::new(),
                ));
                prose.push('\n');
            }
            None => {
                prose.push_str(line);
                prose.push('\n');
            }
            Some(_) if trimmed == "```" => {
                let (line, _, lang, text) = open.take().unwrap();
                blocks.push(Block {
                    file: file.to_path_buf(),
                    line,
                    lang,
                    text,
                });
                prose.push('\n');
            }
            Some((_, fence, _, body)) => {
                let cut = line
                    .char_indices()
                    .take_while(|(at, c)| *at < *fence && *c == ' ')
                    .count();
                body.push_str(&line[cut..]);
                body.push('\n');
                prose.push('\n');
            }
        }
    }
    assert!(
        open.is_none(),
        "{}: a fence is never closed",
        file.display()
    );
    (prose, blocks)
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(prose: &str) -> BTreeSet<String> {
    prose
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

fn read(rel: &Path) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{}: {e}", rel.display()))
}

/// The top folders a path written in the docs may start with.
const TOP: &[&str] = &[
    "scenarios",
    "docs",
    "tests",
    "src",
    "faultd",
    "loadgen",
    "demo",
    "bench",
    "scripts",
    "fuzz",
    "units",
    "alarm",
    "hdr",
    ".ci",
];

#[test]
fn every_relative_link_and_repository_path_in_the_docs_exists() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let code = regex::Regex::new(r"`([^`\s]+)`").unwrap();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let (prose, _) = split(&file, &read(&file));
        let dir = file.parent().unwrap_or(Path::new(""));
        for (n, line) in prose.lines().enumerate() {
            let place = format!("{}:{}", file.display(), n + 1);
            for m in link.captures_iter(line) {
                let target = &m[1];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
                let to = if path.is_empty() {
                    file.clone()
                } else {
                    dir.join(path)
                };
                if !root().join(&to).exists() {
                    wrong.push(format!("{place}: link to {target}: no such file"));
                } else if !fragment.is_empty() && to.extension().is_some_and(|e| e == "md") {
                    let (target_prose, _) = split(&to, &read(&to));
                    if !anchors(&target_prose).contains(fragment) {
                        wrong.push(format!(
                            "{place}: link to {target}: no heading of {} has the anchor #{fragment}",
                            to.display()
                        ));
                    }
                }
            }
            for m in code.captures_iter(line) {
                let path = m[1].trim_end_matches([',', '.', ':']);
                let top = path.split('/').next().unwrap_or("");
                if !path.contains('/')
                    || !TOP.contains(&top)
                    || path.contains(['*', '<', '{', '$', '='])
                    || !path
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
                {
                    continue;
                }
                checked += 1;
                if !root().join(path).exists() && !root().join(dir).join(path).exists() {
                    wrong.push(format!("{place}: `{path}`: no such file or folder"));
                }
            }
        }
    }
    assert!(checked > 200, "only {checked} links and paths found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// What a scenario fragment of the docs is laid over: the fields a scenario needs, with a route `pricing` and a
/// breaker of that name that fragments refer to.
const BASE: &str = r#"
name: docs-example
duration: 10s
dependency:
  routes:
    pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }
  phases:
    - { name: healthy, at: 0s }
    - { name: brownout, at: 2s, routes: { pricing: { latency: { fixed: 2s } } } }
sut: { demo: {} }
load: { rate: 10/s, requests: [ { get: "/product/1" } ] }
"#;

fn yaml(block: &Block) -> Result<Value, String> {
    serde_saphyr::from_str::<Value>(&block.text).map_err(|e| e.to_string())
}

/// Why a YAML example is refused by what reads it, or `None`. `before` holds the scenario fragments met earlier
/// in the same file, laid over each other: an example that is refused on its own may continue them (a breaker
/// read from the log of the `command` SUT of the example before it).
fn refused(block: &Block, before: &mut Value) -> Option<String> {
    let name = block.file.to_string_lossy().into_owned();
    let result = match block.file.to_str() {
        Some("docs/demo.md") => demo::config::DemoConfig::from_yaml(&block.text, &name)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Some("docs/faultd.md") => faultd::Config::from_yaml(&block.text, &name)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Some("docs/ci.md") => action_steps(block),
        _ => scenario_fragment(block, before),
    };
    result.err()
}

/// Steps of a workflow: each step that uses the action gives only inputs action.yml declares.
fn action_steps(block: &Block) -> Result<(), String> {
    let steps = yaml(block)?;
    let action: Value = serde_saphyr::from_str(&read(Path::new("action.yml"))).unwrap();
    let inputs = action["inputs"].as_object().expect("action.yml has inputs");
    let mut uses = 0;
    for step in steps.as_array().ok_or("not a list of steps")? {
        if !step["uses"]
            .as_str()
            .is_some_and(|u| u.contains("faultline"))
        {
            continue;
        }
        uses += 1;
        for key in step["with"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
        {
            if !inputs.contains_key(key) {
                return Err(format!("`with: {key}` is not an input of action.yml"));
            }
        }
    }
    if uses == 0 {
        return Err("no step uses the action".into());
    }
    Ok(())
}

/// Fills every field whose value is `...`, the docs' mark for "as it was", with the field of `base` at the same
/// place (or drops it).
fn fill_elisions(v: &mut Value, base: &Value) {
    if let Some(fields) = v.as_object_mut() {
        fields.retain(|k, f| f.as_str() != Some("...") || !base[k].is_null());
        for (k, f) in fields.iter_mut() {
            if f.as_str() == Some("...") {
                *f = base[k].clone();
            } else {
                fill_elisions(f, &base[k]);
            }
        }
    }
}

/// A whole scenario (it has `name` and `duration`) as it is; a fragment (its elisions filled from [`BASE`]) with
/// its top-level fields laid over [`BASE`], or else over `before`. Files it names are read relative to scenarios/, as the library's scenarios
/// read theirs.
fn scenario_fragment(block: &Block, before: &mut Value) -> Result<(), String> {
    let base: Value = serde_saphyr::from_str(BASE).unwrap();
    let mut fragment = yaml(block)?;
    fill_elisions(&mut fragment, &base);
    let fields = fragment.as_object().ok_or("not a mapping")?;
    // A command SUT of a sweep's example reads the sweep's parameters: given as `--vary NAME=250ms` would.
    let params = regex::Regex::new(r"\{param\.([A-Za-z0-9_-]+)")
        .unwrap()
        .captures_iter(&block.text)
        .map(|c| (c[1].to_string(), "250ms".to_string()))
        .collect();
    let overrides = Overrides {
        params,
        ..Overrides::default()
    };
    let parse = |text: &str| {
        Scenario::parse_in(text, "example.yaml", &root().join("scenarios"), &overrides)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    if fields.contains_key("name") && fields.contains_key("duration") {
        return parse(&block.text);
    }
    let over = |base: &Value| {
        let mut whole = base.clone();
        for (k, v) in fields {
            whole[k] = v.clone();
        }
        whole
    };
    let alone = over(&base);
    let continued = over(before);
    *before = continued.clone();
    parse(&serde_json::to_string_pretty(&alone).unwrap())
        .or_else(|e| parse(&serde_json::to_string_pretty(&continued).unwrap()).map_err(|_| e))
}

#[test]
fn every_yaml_example_in_the_docs_is_accepted_by_what_reads_it() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let (_, blocks) = split(&file, &read(&file));
        let mut before: Value = serde_saphyr::from_str(BASE).unwrap();
        for block in blocks.iter().filter(|b| b.lang == "yaml") {
            checked += 1;
            if let Some(why) = refused(block, &mut before) {
                wrong.push(format!(
                    "{}:{}: {why}\n{}",
                    block.file.display(),
                    block.line,
                    block.text
                ));
            }
        }
    }
    assert!(checked >= 20, "only {checked} YAML examples found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The binaries whose command lines the docs show.
const BINARIES: &[&str] = &["faultline", "faultd", "loadgen", "demo"];

/// A command line as the binary and its words, comments dropped; `None` for a line that runs none of
/// [`BINARIES`]. `cargo run ... -p NAME -- ARGS` runs NAME (faultline without `-p`).
fn command(line: &str) -> Option<(String, Vec<String>)> {
    let line = line.trim().trim_start_matches("$ ");
    let words = shlex::split(line)?;
    let mut words = words
        .into_iter()
        .skip_while(|w| w.contains('=') && !w.starts_with('-'))
        .peekable();
    let first = words.next()?;
    let program = if first == "cargo" {
        let before: Vec<String> = words.by_ref().take_while(|w| w != "--").collect();
        if before.first().map(String::as_str) != Some("run") {
            return None;
        }
        before
            .iter()
            .position(|w| w == "-p")
            .and_then(|i| before.get(i + 1).cloned())
            .unwrap_or_else(|| "faultline".into())
    } else {
        first
    };
    if !BINARIES.contains(&program.as_str()) {
        return None;
    }
    Some((program, words.collect()))
}

/// How a command line of the docs is checked.
#[derive(Debug, PartialEq)]
enum Check {
    /// A command to run as written: its arguments up to a pipe, a redirection or `&&`.
    Run(Vec<String>),
    /// A synopsis (`run SCENARIO [--seed N]`, `--format a|b`): its subcommands, and the flags it names, each of
    /// which their `--help` must list.
    Synopsis {
        subcommands: Vec<String>,
        flags: Vec<String>,
    },
}

fn check_of(words: Vec<String>) -> Check {
    let placeholder = |w: &str| {
        let w = w.trim_end_matches("...");
        !w.is_empty()
            && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && w.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    };
    let synopsis = words
        .iter()
        .any(|w| w.contains(['[', ']']) || placeholder(w) || (w.len() > 1 && w.contains('|')));
    if !synopsis {
        return Check::Run(
            words
                .into_iter()
                .take_while(|w| {
                    !matches!(w.as_str(), "|" | "||" | "&&" | ";" | "&" | "<")
                        && !w.starts_with('>')
                        && !w.starts_with("2>")
                })
                .collect(),
        );
    }
    let subcommands = words
        .iter()
        .take_while(|w| {
            w.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
        .cloned()
        .collect();
    let flags = words
        .iter()
        .flat_map(|w| w.split('|'))
        .map(|w| w.trim_matches(['[', ']']).trim_end_matches("..."))
        .filter(|w| w.starts_with('-') && w.len() > 1)
        .map(|w| {
            w.split('=')
                .next()
                .unwrap_or(w)
                .trim_matches(['[', ']'])
                .to_string()
        })
        .collect();
    Check::Synopsis { subcommands, flags }
}

/// The command lines of a shell block, continuation lines joined.
fn command_lines(block: &Block) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in block.text.lines() {
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    lines
}

/// Runs `program args --help`: what it printed, or why it did not parse.
fn help(program: &str, args: &[String]) -> Result<String, String> {
    let out = Command::new(bin(program))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Why a command line of the docs is wrong, or `None`.
fn wrong_command(program: &str, words: Vec<String>) -> Option<String> {
    match check_of(words) {
        Check::Run(args) => help(program, &args).err(),
        Check::Synopsis { subcommands, flags } => match help(program, &subcommands) {
            Err(why) => Some(why),
            Ok(text) => {
                let listed = |flag: &str| {
                    text.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[')
                        .any(|w| w == flag)
                };
                let missing: Vec<String> = flags.into_iter().filter(|f| !listed(f)).collect();
                (!missing.is_empty()).then(|| {
                    format!(
                        "`{program} {} --help` lists no {}",
                        subcommands.join(" "),
                        missing.join(", ")
                    )
                })
            }
        },
    }
}

#[test]
fn every_command_line_in_the_docs_and_the_help_examples_parses() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    let mut check = |place: String, line: &str| {
        if let Some((program, words)) = command(line) {
            checked += 1;
            if let Some(why) = wrong_command(&program, words) {
                wrong.push(format!("{place}: {}\n{why}", line.trim()));
            }
        }
    };
    for file in markdown_files() {
        let (_, blocks) = split(&file, &read(&file));
        for block in &blocks {
            if matches!(
                block.lang.as_str(),
                "" | "sh" | "bash" | "shell" | "console"
            ) {
                for line in command_lines(block) {
                    check(format!("{}:{}", block.file.display(), block.line), &line);
                }
            }
        }
    }
    // The examples each binary prints under its own --help: the indented lines after `Example(s):`.
    for program in BINARIES {
        let text = help(program, &[]).unwrap_or_else(|e| panic!("{program} --help: {e}"));
        let mut in_examples = false;
        for line in text.lines() {
            if line.starts_with("Example") {
                in_examples = true;
            } else if !line.is_empty() && !line.starts_with(' ') {
                in_examples = false;
            } else if in_examples {
                check(format!("{program} --help"), line);
            }
        }
    }
    assert!(checked >= 40, "only {checked} command lines found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn command_lines_are_read_as_a_shell_reads_them() {
    let words = |v: &[&str]| v.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    let (program, w) =
        command("$ REDIS_PORT=6390 faultline run x.yaml --json | jq .verdict").unwrap();
    assert_eq!(program, "faultline");
    assert_eq!(check_of(w), Check::Run(words(&["run", "x.yaml", "--json"])));
    let (program, w) = command("cargo run --release -p loadgen -- --rate 500/s > out.txt").unwrap();
    assert_eq!(program, "loadgen");
    assert_eq!(check_of(w), Check::Run(words(&["--rate", "500/s"])));
    let (program, w) = command("cargo run --release -- validate 'a b.yaml'  # two files").unwrap();
    assert_eq!(program, "faultline");
    assert_eq!(check_of(w), Check::Run(words(&["validate", "a b.yaml"])));
    let (_, w) =
        command("faultline import LOG... --format nginx|har [--replay-load] [-o FILE]").unwrap();
    assert_eq!(
        check_of(w),
        Check::Synopsis {
            subcommands: words(&["import"]),
            flags: words(&["--format", "--replay-load", "-o"]),
        }
    );
    assert_eq!(command("kubectl apply -f x.yaml"), None);
    assert_eq!(command("cargo build --release"), None);
    assert_eq!(
        anchor("Environment variables: `${NAME}`"),
        "environment-variables-name"
    );
}

#[test]
fn completions_and_man_pages_come_from_the_command_line_definition() {
    let scratch = std::env::temp_dir().join(format!("faultline-docs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let faultline = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_faultline"))
            .args(args)
            .output()
            .unwrap()
    };
    // bash, the shell every Debian has, completes a command and a flag from the script.
    let script = faultline(&["completions", "bash"]);
    assert!(script.status.success());
    let path = scratch.join("faultline.bash");
    std::fs::write(&path, &script.stdout).unwrap();
    let complete = |words: &str, current: usize| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {}; COMP_WORDS=({words}); COMP_CWORD={current}; \
                 _faultline faultline \"${{COMP_WORDS[$COMP_CWORD]}}\" \"${{COMP_WORDS[$COMP_CWORD-1]}}\"; \
                 echo \"${{COMPREPLY[@]}}\"",
                path.display()
            ))
            .output()
            .expect("bash runs (apt-get install bash)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(complete("faultline ru", 1), "run");
    assert_eq!(complete("faultline run --time", 2), "--time-scale");
    assert_eq!(complete("faultline imp", 1), "import");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = faultline(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("time-scale"),
            "{shell}"
        );
    }
    let refused = faultline(&["completions", "tcsh"]);
    assert_eq!(refused.status.code(), Some(2));

    // A page per command the help lists, each in roff with its own title.
    let man = faultline(&["man"]);
    assert!(man.status.success());
    assert!(String::from_utf8_lossy(&man.stdout).contains(".TH faultline 1"));
    let dir = scratch.join("man1");
    assert!(faultline(&["man", "--dir", dir.to_str().unwrap()])
        .status
        .success());
    for command in [
        "run",
        "prove",
        "validate",
        "import",
        "compare",
        "k8s",
        "completions",
        "man",
    ] {
        let page = std::fs::read_to_string(dir.join(format!("faultline-{command}.1")))
            .unwrap_or_else(|e| panic!("faultline-{command}.1: {e}"));
        assert!(
            page.contains(&format!(".TH faultline-{command} 1")),
            "{page}"
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
