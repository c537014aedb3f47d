#!/usr/bin/env bash
# Argo CD's own web UI, built from the `ui/` folder of the pinned Argo CD Go module, so the browser
# tests open the UI that wavegate's users open (not a harness page).
#
# The UI's one dependency that no registry serves is `argo-ui`, a git commit pinned in
# `ui/package.json` (pnpm, from 3.5) or `ui/yarn.lock` (yarn 1, up to 3.4). Its exact source is an
# archive in ../shared/third_party/ (checked against its sha256 before use; a mismatch is
# refused), unpacked beside the writable copy of `ui/` and named as `file:../argo-ui`. Everything
# else comes from npm, with the package manager the release's own Dockerfile uses (pnpm or yarn 1,
# from npm too). The result is cached outside the work tree, keyed by the Argo CD version, and
# never committed:
#
#   $WAVEGATE_CACHE/argocd-ui/v<version>/dist/app      the production webpack build
#
# argocd-server answers every browser navigation with the index.html embedded at compile time
# (`ui.Embedded`, ui/embed.go), so scripts/argocd.sh compiles argocd against a writable copy of the
# module whose ui/dist/app is this build.
#
# Usage: scripts/argocd-ui.sh fetch|build|path [VERSION]
#   fetch   unpack argo-ui and install the UI's packages (network-bound: run it early, beside compiles)
#   build   fetch, then the production webpack build (CPU-bound: about 1 min for 3.5.1 with pnpm,
#           4-19 min for 3.2.11 with yarn on a busy 2-core machine; docs/argocd.md)
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
# ui/package.json's `packageManager` from 3.5 on (checked against it before use).
PNPM_VERSION=10.28.1

die() { echo "argocd-ui: ERROR: $*" >&2; exit 1; }
log() { echo "argocd-ui: $*" >&2; }

pinned_version() {
  sed -n 's#^\(require \|[[:space:]]*\)github\.com/argoproj/argo-cd/v3 v\([^[:space:]]*\)$#\2#p' "$ROOT/hack/argocd/go.mod"
}
VERSION="${2:-$(pinned_version)}"
[[ -n "$VERSION" ]] || die "cannot read the Argo CD version from hack/argocd/go.mod"

# The argo-ui commit each UI pins (ui/yarn.lock `resolved ...#<commit>` for yarn, ui/package.json
# for pnpm), the sha256 of its `git archive` in third_party (../shared/third_party/README.md) and
# the package manager of the release's Dockerfile. 3.6.1's UI pins argo-ui f941b0a3, whose source
# is not available here: it is not built (a UI built from another commit would not be 3.6's).
case "$VERSION" in
  3.2.11)
    ARGO_UI_COMMIT=5cf36101733ce43eed57242a12389f2a7e40bd2b
    ARGO_UI_SHA256=31395bcf652338dfb3d880e0f6c582818c6453c1f7cb5c772d666f383e457386
    PACKAGE_MANAGER=yarn
    ;;
  3.5.1)
    ARGO_UI_COMMIT=c089d1d2d84df87f3712ae661273a5ab0d1ef3b0
    ARGO_UI_SHA256=a211122602fe92627c6276e9f86f55f8b6c40b6322f5ce31e09af8a07ed07517
    PACKAGE_MANAGER=pnpm
    ;;
  *) die "no argo-ui source is known for Argo CD $VERSION (add its commit and sha256 here)" ;;
esac

WORK="$CACHE/argocd-ui/v$VERSION"
DIST="$WORK/dist/app"

module_dir() { # the read-only module of this release in the Go module cache
  local json
  json="$(cd /tmp && go mod download -json "github.com/argoproj/argo-cd/v3@v$VERSION")" || return 1
  printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'
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

pnpm_bin() {
  local prefix="$CACHE/tools/pnpm-$PNPM_VERSION"
  if [[ ! -x "$prefix/node_modules/.bin/pnpm" ]]; then
    log "installing pnpm $PNPM_VERSION from npm"
    mkdir -p "$prefix"
    npm install --silent --no-audit --no-fund --prefix "$prefix" "pnpm@$PNPM_VERSION" >&2
  fi
  echo "$prefix/node_modules/.bin/pnpm"
}

pm_bin() { if [[ "$PACKAGE_MANAGER" == pnpm ]]; then pnpm_bin; else yarn_bin; fi; }

# The git dependency becomes the unpacked archive. For yarn its lock entry goes (yarn writes a
# new one); pnpm updates its lock file itself (`--no-frozen-lockfile`). For pnpm the commit is
# the one package.json names: a mismatch with the archive here means a wrong table entry above.
use_archive() {
  node -e '
    const fs = require("fs"), f = process.argv[1], commit = process.argv[2], pm = process.argv[3];
    const p = JSON.parse(fs.readFileSync(f, "utf8"));
    const dep = p.dependencies && p.dependencies["argo-ui"];
    if (!dep) throw new Error("ui/package.json has no argo-ui dependency");
    if (pm === "pnpm" && !dep.endsWith("#" + commit)) throw new Error("ui/package.json pins argo-ui " + dep + ", not " + commit);
    p.dependencies["argo-ui"] = "file:../argo-ui";
    fs.writeFileSync(f, JSON.stringify(p, null, 2) + "\n");
  ' "$WORK/ui/package.json" "$ARGO_UI_COMMIT" "$PACKAGE_MANAGER"
  if [[ "$PACKAGE_MANAGER" == yarn ]]; then
    awk 'BEGIN{skip=0} /^"argo-ui@/{skip=1; next} skip && /^$/{skip=0; next} !skip' \
      "$WORK/ui/yarn.lock" >"$WORK/ui/yarn.lock.new"
    mv "$WORK/ui/yarn.lock.new" "$WORK/ui/yarn.lock"
  fi
}

check_package_manager() { # upstream's package.json names pnpm's version (corepack's field)
  [[ "$PACKAGE_MANAGER" == pnpm ]] || return 0
  local want
  want="$(node -p 'require(process.argv[1]).packageManager || ""' "$WORK/ui/package.json")"
  [[ "$want" == "pnpm@$PNPM_VERSION" ]] ||
    die "Argo CD $VERSION's ui/package.json asks for packageManager '$want', this script installs pnpm@$PNPM_VERSION"
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
    # What a user's own build does: the package manager fetches the pinned git commit (needs github.com).
    log "$archive is absent: $PACKAGE_MANAGER will fetch argo-ui from its git URL at the pinned commit"
    archive=""
  fi

  mkdir -p "$WORK"
  exec 8>"$WORK/.lock"
  flock 8
  if [[ -f "$WORK/.fetched" ]]; then
    log "dependencies of Argo CD $VERSION's UI present ($WORK/ui/node_modules)"
    return 0
  fi
  local mod pm t0
  mod="$(module_dir)" || die "cannot download the Argo CD $VERSION module"
  [[ -d "$mod/ui" ]] || die "the Argo CD $VERSION module has no ui/ folder ($mod)"
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
  check_package_manager
  pm="$(pm_bin)"

  log "$PACKAGE_MANAGER install for Argo CD $VERSION's UI (downloads from npm)"
  t0=$(date +%s)
  if [[ "$PACKAGE_MANAGER" == pnpm ]]; then
    # --no-frozen-lockfile: the lock file names argo-ui's git URL, package.json now the folder.
    (cd "$WORK/ui" && "$pm" install --no-frozen-lockfile --store-dir "$CACHE/pnpm-store" \
      --reporter=append-only) >"$WORK/install.log" 2>&1 ||
      { tail -n 40 "$WORK/install.log" >&2; die "pnpm install failed (log: $WORK/install.log)"; }
  else
    (cd "$WORK/ui" && YARN_CACHE_FOLDER="$CACHE/yarn-cache" "$pm" install --non-interactive \
      --ignore-engines --network-timeout 600000 --network-concurrency 16) >"$WORK/install.log" 2>&1 ||
      { tail -n 40 "$WORK/install.log" >&2; die "yarn install failed (log: $WORK/install.log)"; }
  fi
  log "$PACKAGE_MANAGER install took $(( $(date +%s) - t0 ))s"
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
  local pm t0
  pm="$(pm_bin)"
  log "webpack production build of Argo CD $VERSION's UI ($PACKAGE_MANAGER build)"
  t0=$(date +%s)
  rm -rf "$WORK/dist"
  # package.json's `build` script empties ./dist and runs webpack in production mode; the
  # environment is upstream's Dockerfile's (NODE_ENV switches webpack.config.js to production).
  (cd "$WORK/ui" && NODE_ENV=production NODE_ONLINE_ENV=offline ARGO_VERSION="v$VERSION" \
    NODE_OPTIONS=--max-old-space-size=6144 nice -n 5 "$pm" run build) >"$WORK/webpack.log" 2>&1 ||
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
