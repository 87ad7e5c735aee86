#!/usr/bin/env bash
# Step 2 of the faultline action: run every scenario given, one report folder each under $FAULTLINE_REPORT_ROOT.
#   FAULTLINE_SCENARIOS     scenario files or globs, separated by spaces or newlines (required)
#   FAULTLINE_TIME_SCALE    passed to --time-scale (default 1)
#   FAULTLINE_REPORT_ROOT   where the report folders go (default reports/ci)
# Every scenario runs even when an earlier one failed. `faultline run` itself appends each run's Markdown summary
# to $GITHUB_STEP_SUMMARY and prints the annotations. Writes to $GITHUB_OUTPUT: `exit-code`, the worst exit code
# (3 the run broke > 2 bad scenario > 130 interrupted > 1 an expectation failed > 4 inconclusive > 0 all held),
# and `report-dir`. Exits 0 so that the report folders are uploaded whatever happened; verdict.sh fails the step.
set -uo pipefail

root="${FAULTLINE_REPORT_ROOT:-reports/ci}"
scale="${FAULTLINE_TIME_SCALE:-1}"
mkdir -p "$root"

rank() { case "$1" in 0) echo 0 ;; 4) echo 1 ;; 1) echo 2 ;; 130) echo 3 ;; 2) echo 4 ;; *) echo 5 ;; esac; }

worst=0
count=0
# Split the input into words without expanding them, then expand each one as a glob (no match: no file).
set -f
patterns=( ${FAULTLINE_SCENARIOS:-} )
set +f
shopt -s nullglob
for pattern in "${patterns[@]}"; do
  files=( $pattern )
  if (( ${#files[@]} == 0 )); then
    echo "::error title=no scenario::no file matches $pattern"
    code=2
    (( $(rank $code) > $(rank $worst) )) && worst=$code
    continue
  fi
  for file in "${files[@]}"; do
    name="$(basename "$file")"
    name="${name%.*}"
    echo "::group::faultline run $file"
    faultline run "$file" --time-scale "$scale" --report-dir "$root/$name"
    code=$?
    echo "::endgroup::"
    echo "$file: exit code $code"
    count=$((count + 1))
    (( $(rank $code) > $(rank $worst) )) && worst=$code
  done
done
if (( count == 0 )) && (( worst == 0 )); then
  echo "::error title=no scenario::the scenarios input is empty"
  worst=2
fi
if [[ -n "${GITHUB_OUTPUT:-}" ]]; then
  {
    echo "exit-code=$worst"
    echo "report-dir=$root"
  } >> "$GITHUB_OUTPUT"
fi
echo "$count scenario(s) run; worst exit code $worst"
exit 0
