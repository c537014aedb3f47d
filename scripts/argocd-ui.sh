#!/usr/bin/env bash
# Argo CD's own web UI, built from the `ui/` folder of the pinned Argo CD Go module, so the browser
# tests open the UI that wavegate's users open (not a harness page).
#
# The UI's one dependency that no registry serves is `argo-ui`, a git URL pinned in `ui/yarn.lock`.
# Its exact source is an archive in ../shared/third_party/ (checked against its sha256 before use;
# a mismatch is refused). Everything else comes from npm with yarn 1 (from npm too). The result is
# cached outside the work tree, keyed by the Argo CD version, and never committed:
#
#   $WAVEGATE_CACHE/argocd-ui/v<version>/dist/app      the production webpack build
#
# argocd-server answers every browser navigation with the index.html embedded at compile time
# (`ui.Embedded`, ui/embed.go), so scripts/argocd.sh compiles argocd against a writable copy of the
# module whose ui/dist/app is this build.
#
# Usage: scripts/argocd-ui.sh fetch|build|path [VERSION]
#   fetch   unpack argo-ui and run `yarn install` (network-bound: run it early, beside compiles)
#   build   fetch, then the production webpack build (CPU-bound, ~15 min on a busy 2-core machine)
#   path    print the dist/app folder of a finished build (exit 1 when there is none)
# VERSION defaults to the one pinned in hack/argocd/go.mod.
#
# Environment: WAVEGATE_CACHE (default ~/.cache/wavegate), WAVEGATE_THIRD_PARTY (default
# ../shared/third_party from the project root).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${WAVEGATE_CACHE:-$HOME/.cache/wavegate}"
THIRD_PARTY="${WAVEGATE_THIRD_PARTY:-$ROOT/../shared/third_party}"
YARN_VERSION=1.22.22

die() { echo "argocd-ui: ERROR: $*" >&2; exit 1; }
log() { echo "argocd-ui: $*" >&2; }

pinned_version() {
  sed -n 's#^\(require \|[[:space:]]*\)github\.com/argoproj/argo-cd/v3 v\([^[:space:]]*\)$#\2#p' "$ROOT/hack/argocd/go.mod"
}
VERSION="${2:-$(pinned_version)}"
[[ -n "$VERSION" ]] || die "cannot read the Argo CD version from hack/argocd/go.mod"

# The argo-ui commit each UI pins (ui/yarn.lock `resolved ...#<commit>`), and the sha256 of its
# `git archive` in third_party (../shared/third_party/README.md). Only the yarn-based UIs (3.0-3.3)
# are built here; 3.4+ moved to pnpm.
case "$VERSION" in
  3.2.11)
    ARGO_UI_COMMIT=5cf36101733ce43eed57242a12389f2a7e40bd2b
    ARGO_UI_SHA256=31395bcf652338dfb3d880e0f6c582818c6453c1f7cb5c772d666f383e457386
    ;;
  *) die "no argo-ui source is known for Argo CD $VERSION (add its commit and sha256 here)" ;;
esac

WORK="$CACHE/argocd-ui/v$VERSION"
DIST="$WORK/dist/app"

module_dir() {
  (cd "$ROOT/hack/argocd" && go mod download github.com/argoproj/argo-cd/v3 >/dev/null &&
    go list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)
}

yarn_bin() {
  local prefix="$CACHE/tools/yarn-$YARN_VERSION"
  if [[ ! -x "$prefix/node_modules/.bin/yarn" ]]; then
    log "installing yarn $YARN_VERSION from npm"
    mkdir -p "$prefix"
    npm install --silent --no-audit --no-fund --prefix "$prefix" "yarn@$YARN_VERSION" >&2
  fi
  echo "$prefix/node_modules/.bin/yarn"
}

# The git dependency becomes the unpacked archive; its lock entry goes (yarn writes a new one).
use_archive() {
  node -e '
    const fs = require("fs"), f = process.argv[1];
    const p = JSON.parse(fs.readFileSync(f, "utf8"));
    if (!p.dependencies || !p.dependencies["argo-ui"]) throw new Error("ui/package.json has no argo-ui dependency");
    p.dependencies["argo-ui"] = "file:../argo-ui";
    fs.writeFileSync(f, JSON.stringify(p, null, 2) + "\n");
  ' "$WORK/ui/package.json"
  awk 'BEGIN{skip=0} /^"argo-ui@/{skip=1; next} skip && /^$/{skip=0; next} !skip' \
    "$WORK/ui/yarn.lock" >"$WORK/ui/yarn.lock.new"
  mv "$WORK/ui/yarn.lock.new" "$WORK/ui/yarn.lock"
}

cmd_fetch() {
  command -v node >/dev/null || die "node is required"
  command -v npm >/dev/null || die "npm is required"
  local archive="$THIRD_PARTY/argo-ui-$ARGO_UI_COMMIT.tar.gz" got
  if [[ -f "$archive" ]]; then
    got="$(sha256sum "$archive" | cut -d' ' -f1)"
    [[ "$got" == "$ARGO_UI_SHA256" ]] ||
      die "$archive has sha256 $got, expected $ARGO_UI_SHA256: refusing to build Argo CD's UI from it"
  else
    # What a user's own build does: yarn fetches the pinned git commit (needs github.com).
    log "$archive is absent: yarn will fetch argo-ui from its git URL at the pinned commit"
    archive=""
  fi

  mkdir -p "$WORK"
  exec 8>"$WORK/.lock"
  flock 8
  if [[ -f "$WORK/.fetched" ]]; then
    log "dependencies of Argo CD $VERSION's UI present ($WORK/ui/node_modules)"
    return 0
  fi
  local mod yarn t0
  mod="$(module_dir)" || die "cannot download the Argo CD $VERSION module"
  rm -rf "$WORK/ui" "$WORK/argo-ui"
  cp -r "$mod/ui" "$WORK/ui"
  chmod -R u+w "$WORK/ui"
  if [[ -n "$archive" ]]; then
    mkdir -p "$WORK/argo-ui"
    # `git archive --prefix=argo-ui/`: the package is the archive's one top folder.
    tar -xzf "$archive" -C "$WORK/argo-ui" --strip-components=1
    [[ -f "$WORK/argo-ui/package.json" && -d "$WORK/argo-ui/src/styles" ]] ||
      die "$archive does not unpack to an argo-ui package (package.json, src/styles)"
    use_archive
  fi
  yarn="$(yarn_bin)"

  log "yarn install for Argo CD $VERSION's UI (downloads from npm; 3 min measured the first time)"
  t0=$(date +%s)
  (cd "$WORK/ui" && YARN_CACHE_FOLDER="$CACHE/yarn-cache" "$yarn" install --non-interactive \
    --ignore-engines --network-timeout 600000 --network-concurrency 16) >"$WORK/yarn-install.log" 2>&1 ||
    { tail -n 40 "$WORK/yarn-install.log" >&2; die "yarn install failed (log: $WORK/yarn-install.log)"; }
  log "yarn install took $(( $(date +%s) - t0 ))s"
  touch "$WORK/.fetched"
}

cmd_build() {
  if [[ -f "$DIST/index.html" && -f "$WORK/.built" ]]; then
    log "Argo CD $VERSION's UI present ($DIST)"
    return 0
  fi
  cmd_fetch
  exec 8>"$WORK/.lock"
  flock 8
  local yarn t0
  yarn="$(yarn_bin)"
  log "webpack production build of Argo CD $VERSION's UI (~15 min on a busy 2-core machine)"
  t0=$(date +%s)
  rm -rf "$WORK/dist"
  # package.json's `build` script empties ./dist and runs webpack in production mode; the
  # environment is upstream's Dockerfile's (NODE_ENV switches webpack.config.js to production).
  (cd "$WORK/ui" && NODE_ENV=production NODE_ONLINE_ENV=offline ARGO_VERSION="v$VERSION" \
    NODE_OPTIONS=--max-old-space-size=6144 nice -n 5 "$yarn" build) >"$WORK/webpack.log" 2>&1 ||
    { tail -n 40 "$WORK/webpack.log" >&2; die "the UI build failed (log: $WORK/webpack.log)"; }
  [[ -f "$WORK/ui/dist/app/index.html" ]] || die "the UI build wrote no dist/app/index.html"
  mkdir -p "$WORK/dist"
  mv "$WORK/ui/dist/app" "$DIST"
  touch "$WORK/.built"
  log "built Argo CD $VERSION's UI in $(( $(date +%s) - t0 ))s, $(du -sm "$DIST" | cut -f1) MB"
}

cmd_path() {
  [[ -f "$DIST/index.html" && -f "$WORK/.built" ]] || return 1
  echo "$DIST"
}

case "${1:-}" in
  fetch) cmd_fetch ;;
  build) cmd_build ;;
  path) cmd_path ;;
  *) die "usage: $0 fetch|build|path [VERSION]" ;;
esac
