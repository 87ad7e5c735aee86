#!/usr/bin/env bash
# Last step of the faultline action: turn the worst exit code of the runs ($FAULTLINE_EXIT_CODE) into the step's
# outcome. 0 passes; 4 (nothing failed, something could not be judged) passes with a warning unless
# FAULTLINE_FAIL_ON_INCONCLUSIVE=true; 1 (an expectation failed) and anything else (bad scenario, broken run,
# interrupted) fail with that code.
set -euo pipefail

code="${FAULTLINE_EXIT_CODE:-}"
case "$code" in
  0)
    echo "every expectation held"
    ;;
  4)
    if [[ "${FAULTLINE_FAIL_ON_INCONCLUSIVE:-false}" == "true" ]]; then
      echo "::error title=faultline::an expectation could not be judged (exit code 4)"
      exit 4
    fi
    echo "::warning title=faultline::nothing failed, but an expectation could not be judged (exit code 4)"
    ;;
  1)
    echo "::error title=faultline::an expectation failed (exit code 1); see the job summary and the report artifact"
    exit 1
    ;;
  "")
    echo "::error title=faultline::no exit code from the run step"
    exit 3
    ;;
  *)
    echo "::error title=faultline::the run did not complete as a test (exit code $code)"
    exit "$code"
    ;;
esac
