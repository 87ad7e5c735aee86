#!/usr/bin/env python3
"""Runs the workspace's test binaries, already built, in two lanes side by side, and doc tests after.

    cargo test --workspace --release --locked --no-run --message-format=json-render-diagnostics > ARTIFACTS
    scripts/run_test_binaries.py ARTIFACTS

`cargo test` runs one test binary after another. faultline's integration suite (tests/suite.rs) is mostly
end-to-end runs that wait on a scenario's real time with the CPU two-thirds idle; the other binaries (faultd's,
loadgen's and the demo's suites, import_records, the unit tests) take about a minute and a half one after another.
Here the suite runs in one lane and the others, longest first, in the second, then the doc tests: the same tests,
the same binaries, as `cargo test` would run them (working directory the package's root, `[env]` of
.cargo/config.toml), each binary's output kept in target/test-logs/ and shown whole when it fails.

A test runner that schedules across binaries (cargo-nextest) would do this too, but it is built from source on a
fresh machine: minutes of a 2-core machine's build, each time, for what thirty lines do here.
"""

import json
import os
import subprocess
import sys
import threading
import time
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "target" / "test-logs"
# The binary that gets a lane to itself: the one that runs longest, waiting on real time.
OWN_LANE = ("faultline", "suite")


def binaries(artifacts):
    """(package, target name, target kind, package directory, executable) of each test binary cargo built."""
    found = []
    for line in artifacts.read_text().splitlines():
        m = json.loads(line) if line.startswith("{") else {}
        if m.get("reason") != "compiler-artifact" or not m["profile"]["test"] or not m.get("executable"):
            continue
        # `package_id` is `path+file:///dir#name@version`, or `path+file:///dir/name#version` when the folder
        # is named after the package.
        location, _, version = m["package_id"].partition("#")
        package = version.partition("@")[0] if "@" in version else location.rsplit("/", 1)[-1]
        found.append((package, m["target"]["name"], m["target"]["kind"][0], Path(m["manifest_path"]).parent,
                      m["executable"]))
    return found


def config_env():
    """The `[env]` table of .cargo/config.toml, as cargo hands it to the tests: `KEY = "value"` and
    `KEY = { value = "path", relative = true }` (a path from the folder that holds .cargo/)."""
    env, in_env = {}, False
    for line in (ROOT / ".cargo" / "config.toml").read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            in_env = line == "[env]"
        elif in_env and line and not line.startswith("#"):
            plain = re.fullmatch(r'([A-Z0-9_]+) = "([^"]*)"', line)
            relative = re.fullmatch(r'([A-Z0-9_]+) = \{ value = "([^"]*)", relative = true \}', line)
            if plain:
                env[plain[1]] = plain[2]
            elif relative:
                env[relative[1]] = str(ROOT / relative[2])
            else:
                sys.exit(f"run_test_binaries: cannot read this line of .cargo/config.toml's [env]: {line}")
    return env


class Runner:
    def __init__(self):
        self.lock = threading.Lock()
        self.failed = []
        self.env = dict(os.environ)
        for key, value in config_env().items():
            self.env.setdefault(key, value)

    def report(self, label, code, took, log):
        text = log.read_text(errors="replace")
        results = [l for l in text.splitlines() if l.startswith("test result:")]
        line = results[-1].removeprefix("test result: ") if results else "no test result"
        with self.lock:
            print(f"{'ok    ' if code == 0 else 'FAILED'} {label}: {line} ({took:.0f} s)", flush=True)
            if code != 0:
                self.failed.append(label)
                print(f"--- {log.relative_to(ROOT)} ---\n{text}--- end of {label} ---", flush=True)

    def run(self, label, argv, cwd):
        log = LOGS / (label.replace("/", "_").replace(" ", "_") + ".log")
        started = time.monotonic()
        with log.open("w") as out:
            code = subprocess.call(argv, cwd=cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        self.report(label, code, time.monotonic() - started, log)

    def lane(self, jobs):
        for label, argv, cwd in jobs:
            self.run(label, argv, cwd)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    LOGS.mkdir(parents=True, exist_ok=True)
    jobs = []
    for package, name, kind, cwd, exe in binaries(Path(sys.argv[1])):
        label = f"{package} {'unit tests' if kind in ('lib', 'bin') else f'tests/{name}.rs'}"
        if kind == "bin":
            label += f" (bin {name})"
        jobs.append(((package, name) == OWN_LANE, label, [exe], cwd))
    own = [(l, a, c) for alone, l, a, c in jobs if alone]
    if len(own) != 1:
        sys.exit(f"run_test_binaries: expected one {OWN_LANE[0]} tests/{OWN_LANE[1]}.rs among the binaries")
    # Longest first in the second lane: import_records (a minute), then the suites, then the unit tests.
    rank = lambda j: (0 if "import_records" in j[0] else 1 if "tests/" in j[0] else 2, j[0])
    rest = sorted(((l, a, c) for alone, l, a, c in jobs if not alone), key=rank)
    print(f"run_test_binaries: {len(jobs)} test binaries, {own[0][0]} beside the other {len(rest)}; "
          f"logs in {LOGS.relative_to(ROOT)}/", flush=True)
    runner = Runner()
    side = threading.Thread(target=runner.lane, args=(rest,))
    side.start()
    runner.lane(own)
    side.join()
    runner.run("doc tests", ["cargo", "test", "--workspace", "--release", "--locked", "--doc"], ROOT)
    if runner.failed:
        print(f"run_test_binaries: {len(runner.failed)} failed: {', '.join(runner.failed)}", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
