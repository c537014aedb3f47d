#!/usr/bin/env bash
# Installs what the browser tests need, idempotently: Debian's chromium (never a downloaded
# browser build) and the npm packages pinned in package-lock.json.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
# scripts/test.sh runs this early in the background and again from its Argo CD lane: one at a time.
exec 9>.install.lock
flock 9

if ! [ -x /usr/bin/chromium ]; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends chromium
fi

# playwright-core never downloads browsers itself; the variable keeps it that way for any
# playwright package that might be added later.
if ! [ -d node_modules/playwright-core ] || ! [ -d node_modules/react ] || ! [ -d node_modules/react-dom ] \
   || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
fi
