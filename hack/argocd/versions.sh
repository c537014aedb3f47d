# shellcheck shell=bash
# Argo CD releases wavegate is tested against, and the Go module each one builds from.
# Sourced (bash) by scripts/argocd.sh, scripts/test.sh and hack/argocd/gen-gomod.sh; needs ROOT
# (the project root) and CACHE (WAVEGATE_CACHE) set, and die().
#
# - The pinned release's go.mod + go.sum are hack/argocd/go.mod + go.sum (its web UI is the one
#   built and tested, scripts/argocd-ui.sh).
# - Every other release upstream still supports has its own generated go.mod + go.sum in
#   hack/argocd/v<major>.<minor>/ (hack/argocd/gen-gomod.sh VERSION). Together with the pinned one
#   these are the default matrix (`scripts/argocd.sh versions`).
# - Releases of lines upstream no longer patches keep theirs in hack/argocd/eol/v<major>.<minor>/:
#   reachable by WAVEGATE_ARGOCD_VERSION and listed by `versions --all`, not run by default.
# - Each release is built and tested in a module assembled under $CACHE/argocd-mod/v<version>/
#   from its go.mod/go.sum and hack/argocd's sources (tools.go, healthcheck/, shardassign/), so
#   one test judges every release with that release's own code.
# - gitops-engine has three homes: github.com/argoproj/gitops-engine (up to 3.2); a nested module
#   of the argo-cd repository (3.3-3.5: `github.com/argoproj/argo-cd/gitops-engine =>
#   ./gitops-engine` in upstream's go.mod), which the Go module proxy does not serve, so its source
#   is an archive in ../shared/third_party/, checked against the sha256 below and unpacked under
#   $CACHE/src/; and from 3.6 the published module github.com/argoproj/argo-cd/gitops-engine/v3.
#   The imports of the healthcheck test follow the release's path.
# - A release whose go.mod asks for a newer Go than the machine's names the toolchain in a
#   `toolchain` line; the scripts run the go command with GOTOOLCHAIN set to it.

ARGOCD_THIRD_PARTY="${WAVEGATE_THIRD_PARTY:-$ROOT/../shared/third_party}"
# Where each release's module is assembled (WAVEGATE_ARGOCD_MOD_ROOT: a checkout whose Go sources
# differ from another's, e.g. a test building its own program, keeps its modules apart), and the
# Go packages of hack/argocd copied into it: the healthcheck test and the shard oracle.
ARGOCD_MOD_ROOT="${WAVEGATE_ARGOCD_MOD_ROOT:-$CACHE/argocd-mod}"
ARGOCD_PACKAGES="healthcheck shardassign"

# sha256 of `git archive` of argo-cd's gitops-engine/ folder at each tag that needs it
# (../shared/third_party/README.md).
argocd_gitops_engine_sha256() {
  case "$1" in
    3.4.7) echo 41c8093334d900e10acaace0927e44dfbe27c472d3b9d0750079cb3040abaa0e ;;
    3.5.1) echo fe310f93adb1e891df8f0810d9c6d147fd915cebab20a3aa6bd79e16caa41a4c ;;
    *) return 1 ;;
  esac
}

argocd_modfile_version() { # go.mod -> the argo-cd/v3 version it requires
  sed -n 's#^\(require \|[[:space:]]*\)github\.com/argoproj/argo-cd/v3 v\([^[:space:]]*\)$#\2#p' "$1" | head -n1
}

argocd_pinned_version() { argocd_modfile_version "$ROOT/hack/argocd/go.mod"; }

argocd_line() { local v="$1"; echo "${v%.*}"; } # 3.5.1 -> 3.5

# The go.mod folder of a release: hack/argocd for the pinned line, hack/argocd/v<line> for another
# supported one, hack/argocd/eol/v<line> for one out of upstream support. A line with no folder yet
# gets hack/argocd/v<line> (gen-gomod.sh creates it).
argocd_modfile_dir() {
  local pinned line; pinned="$(argocd_pinned_version)"; line="$(argocd_line "$1")"
  if [[ "$line" == "$(argocd_line "$pinned")" ]]; then
    echo "$ROOT/hack/argocd"
  elif [[ ! -f "$ROOT/hack/argocd/v$line/go.mod" && -f "$ROOT/hack/argocd/eol/v$line/go.mod" ]]; then
    echo "$ROOT/hack/argocd/eol/v$line"
  else
    echo "$ROOT/hack/argocd/v$line"
  fi
}

argocd_supported_versions() { # the default matrix, oldest first
  local f
  for f in "$ROOT/hack/argocd/go.mod" "$ROOT"/hack/argocd/v*/go.mod; do
    [[ -f "$f" ]] && argocd_modfile_version "$f"
  done | sort -V
}

argocd_all_versions() { # the default matrix and the out-of-support releases, oldest first
  local f
  { argocd_supported_versions
    for f in "$ROOT"/hack/argocd/eol/v*/go.mod; do
      [[ -f "$f" ]] && argocd_modfile_version "$f"
    done; } | sort -V
}

# "3.5", "v3.5.1" or "3.5.1" -> "3.5.1", if a build module for it is committed; empty -> pinned.
argocd_resolve_version() {
  local want="${1#v}" v
  [[ -n "$want" ]] || { argocd_pinned_version; return; }
  for v in $(argocd_all_versions); do
    if [[ "$v" == "$want" || "$(argocd_line "$v")" == "$want" ]]; then echo "$v"; return; fi
  done
  die "Argo CD $want has no build module (known: $(argocd_all_versions | tr '\n' ' ')); generate one with hack/argocd/gen-gomod.sh $want"
}

# The Go toolchain a release's build module names (`toolchain goX.Y.Z`), empty when the machine's
# go is new enough. GOTOOLCHAIN=<it> makes the go command fetch it from the module proxy once.
argocd_toolchain() {
  sed -n 's/^toolchain \(go[0-9.]*\)$/\1/p' "$(argocd_modfile_dir "$1")/go.mod" 2>/dev/null | head -n1
}

# The module path of a release's gitops-engine, as its build module requires it.
argocd_gitops_engine_path() {
  local mod p
  mod="$(argocd_modfile_dir "$1")/go.mod"
  for p in github.com/argoproj/argo-cd/gitops-engine/v3 github.com/argoproj/argo-cd/gitops-engine github.com/argoproj/gitops-engine; do
    if grep -Eq "^(require |[[:space:]]+)${p//./\\.} v" "$mod"; then echo "$p"; return 0; fi
  done
  die "$mod requires no gitops-engine module"
}

argocd_gitops_engine_nested() { # version -> true when its gitops-engine is argo-cd's nested module
  grep -q '^replace github\.com/argoproj/argo-cd/gitops-engine => \./gitops-engine$' "$(argocd_modfile_dir "$1")/go.mod" 2>/dev/null
}

# Unpacks (once) the sha256-checked gitops-engine source of a release; prints its folder.
argocd_gitops_engine_source() {
  local version="$1" want got archive dest
  want="$(argocd_gitops_engine_sha256 "$version")" ||
    die "no gitops-engine source is known for Argo CD $version (add its archive and sha256 to hack/argocd/versions.sh)"
  archive="$ARGOCD_THIRD_PARTY/argo-cd-v$version-gitops-engine.tar.gz"
  dest="$CACHE/src/argo-cd-v$version-gitops-engine"
  [[ -f "$archive" ]] ||
    die "$archive is missing: Argo CD $version's gitops-engine is a nested module of the argo-cd repository that the Go module proxy does not serve"
  if [[ ! -f "$dest/.sha256" || "$(cat "$dest/.sha256")" != "$want" ]]; then
    got="$(sha256sum "$archive" | cut -d' ' -f1)"
    [[ "$got" == "$want" ]] ||
      die "$archive has sha256 $got, expected $want: refusing to build Argo CD $version from it"
    rm -rf "$dest.tmp"; mkdir -p "$dest.tmp"
    tar -xzf "$archive" -C "$dest.tmp" --no-same-owner
    [[ -f "$dest.tmp/gitops-engine/go.mod" ]] || die "$archive holds no gitops-engine/go.mod"
    echo "$got" >"$dest.tmp/.sha256"
    rm -rf "$dest"; mv "$dest.tmp" "$dest"
  fi
  echo "$dest/gitops-engine"
}

_argocd_put() { # src dst: copy only when the content differs (a build may be reading dst)
  cmp -s "$1" "$2" 2>/dev/null && return 0
  # A temporary name of this process's own: the test command assembles one release's module from
  # two processes at once (its build and its hack/argocd test).
  cp "$1" "$2.tmp.$$" && mv "$2.tmp.$$" "$2"
}

# The folder to run `go build` / `go test` in for a release, assembled under $ARGOCD_MOD_ROOT.
# With a second argument "generate" (gen-gomod.sh), go.sum need not exist yet. Call it as
# `dir="$(argocd_module V)" || exit`: a failure inside is a non-zero status, not an exit.
argocd_module() {
  local version="$1" mode="${2:-}" src dir f nested=false engine_path
  src="$(argocd_modfile_dir "$version")"
  [[ -f "$src/go.mod" ]] || die "$src/go.mod missing (hack/argocd/gen-gomod.sh $version)"
  [[ -f "$src/go.sum" || "$mode" == generate ]] || die "$src/go.sum missing (hack/argocd/gen-gomod.sh $version)"
  argocd_gitops_engine_nested "$version" && nested=true
  engine_path="$(argocd_gitops_engine_path "$version")" || return 1
  dir="$ARGOCD_MOD_ROOT/v$version"
  mkdir -p "$dir"
  _argocd_put "$src/go.mod" "$dir/go.mod"
  if [[ -f "$src/go.sum" ]]; then _argocd_put "$src/go.sum" "$dir/go.sum"; else rm -f "$dir/go.sum"; fi
  _argocd_put "$ROOT/hack/argocd/tools.go" "$dir/tools.go"
  local pkg
  for pkg in $ARGOCD_PACKAGES; do
    mkdir -p "$dir/$pkg"
    for f in "$dir/$pkg"/*.go; do # a source removed from hack/argocd goes here too
      if [[ -e "$f" && ! -e "$ROOT/hack/argocd/$pkg/${f##*/}" ]]; then rm -f "$f"; fi
    done
    # The sources import gitops-engine under any of its three paths; each release gets its own.
    for f in "$ROOT/hack/argocd/$pkg"/*.go; do
      sed -E "s#\"github\.com/argoproj/(argo-cd/gitops-engine(/v3)?|gitops-engine)/#\"$engine_path/#" "$f" >"$dir/$pkg/.import.$$"
      _argocd_put "$dir/$pkg/.import.$$" "$dir/$pkg/${f##*/}"
      rm -f "$dir/$pkg/.import.$$"
    done
  done
  if $nested; then
    # die() in a command substitution ends only that subshell: pass its failure on.
    local engine
    engine="$(argocd_gitops_engine_source "$version")" || return 1
    ln -sfn "$engine" "$dir/gitops-engine" || return 1
  else
    rm -f "$dir/gitops-engine"
  fi
  echo "$dir"
}
