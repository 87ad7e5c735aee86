#!/usr/bin/env bash
# Step 1 of the faultline action: make `faultline` runnable by the next steps.
#   FAULTLINE_INSTALL=build  (default) build it with cargo from the action's checkout ($FAULTLINE_SOURCE) and put
#                            target/release on $GITHUB_PATH;
#   FAULTLINE_INSTALL=path   use the `faultline` already on PATH (a container image, a cached binary).
set -euo pipefail

mode="${FAULTLINE_INSTALL:-build}"
case "$mode" in
  build)
    src="${FAULTLINE_SOURCE:-${GITHUB_ACTION_PATH:-.}}"
    # The same command the Containerfile's build stage runs.
    (cd "$src" && "${CARGO:-cargo}" build --release --locked -p faultline -p faultd -p loadgen)
    bin="$(cd "$src" && pwd)/target/release"
    if [[ -n "${GITHUB_PATH:-}" ]]; then
      echo "$bin" >> "$GITHUB_PATH"
    fi
    echo "faultline built in $bin"
    ;;
  path)
    if ! command -v faultline >/dev/null; then
      echo "::error title=faultline not found::install: path, but no faultline on PATH" >&2
      exit 2
    fi
    echo "using $(command -v faultline)"
    ;;
  *)
    echo "::error title=bad input::install must be build or path, not '$mode'" >&2
    exit 2
    ;;
esac
