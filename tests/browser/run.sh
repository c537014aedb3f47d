#!/usr/bin/env bash
# Runs the browser tests against a running `wavegate serve`.
#
#   WAVEGATE_URL=http://127.0.0.1:8080/ KUBECONFIG=... tests/browser/run.sh [test files...]
#
# Needs WAVEGATE_URL (the tests fail without it), KUBECONFIG for the dashboard test (it patches
# Service cicd/forgejo), optional WAVEGATE_TOKEN, TEST_OUTPUT (screenshots go to
# $TEST_OUTPUT/screenshots, default <repo>/test-output/screenshots). See README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if ! [ -d node_modules/playwright-core ]; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
fi
if ! [ -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
  echo "run.sh: ${CHROMIUM:-/usr/bin/chromium} is missing; run tests/browser/install.sh" >&2
  exit 1
fi
if [ -z "${WAVEGATE_URL:-}" ]; then
  echo "run.sh: WAVEGATE_URL is not set; start \`wavegate serve\` with the seed scenarios and point WAVEGATE_URL at it" >&2
  exit 1
fi

if [ "$#" -eq 0 ]; then set -- extension.test.mjs dashboard.test.mjs timeline.test.mjs waves-model.test.mjs; fi
# One file at a time: the dashboard test changes the scenario the extension test reads.
exec node --test --test-concurrency=1 "$@"
