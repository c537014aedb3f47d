#!/usr/bin/env bash
# The release, checked without a container engine or a registry:
#
#   1. .github/workflows/*.yml pass actionlint (built from its Go module by scripts/tools.sh);
#      a deliberately broken workflow fails it (the linter is live, not a no-op).
#   2. The image's root filesystem, assembled the way the Dockerfile's runtime stage ends up:
#      the Debian 12 packages that gcr.io/distroless/cc-debian12 is made of (base-files, netbase,
#      tzdata, ca-certificates, libc6, libgcc-s1, libgomp1, libstdc++6, libssl3; fetched with
#      `apt-get download`, unpacked with `dpkg -x`), the CA bundle and the passwd/group entries
#      distroless writes (nonroot = 65532), and the binary as /wavegate. Then `/wavegate serve`
#      runs FROM it — bubblewrap with that tree as `/`, read-only, in a user namespace entered as
#      uid/gid 65532 (not root on the host either) — against the shared local control plane
#      with a kubeconfig bind-mounted read-only, and must answer /healthz, /readyz and a health
#      ask. Nothing from the host's root is visible to it.
#
# The binary: $WAVEGATE_RELEASE_BIN, default target/release/wavegate when it is newer than the
# debug one, else target/debug/wavegate. With no debug build, the release one only when it was
# built here (cargo's dep-info beside it, target/release/wavegate.d, names this checkout's
# src/main.rs) and is newer than everything it was built from: Cargo.toml, Cargo.lock and the
# files that dep-info names, so not a test-only file cargo would not rebuild it for. One left
# from older sources fails the check, naming the newer file, rather than be checked in their
# stead.
# Both link glibc dynamically, as the Dockerfile's release build on rust:1-bookworm does, so both
# run on the same Debian 12 libraries; the release build (whole-program LTO) is too costly for
# every CI run on 2 cores (docs/benchmarks.md).
#
# Needs: apt-get + dpkg (Debian 12), bwrap (Debian's bubblewrap), setpriv, curl, go, and the local
# control plane up (scripts/control-plane.sh up).
set -euo pipefail
# Symlinks resolved, as in the paths cargo writes.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
CACHE="${WAVEGATE_CACHE:-$HOME/.cache/wavegate}"
OUT="${TEST_OUTPUT:-$ROOT/test-output}/release"
mkdir -p "$OUT"
fail() { echo "release: FAIL: $*" >&2; exit 1; }
log() { echo "release: $*" >&2; }
passed=0
pass() { log "ok: $*"; passed=$((passed + 1)); }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/wavegate-release.XXXXXX")"
SERVE_PID=
cleanup() {
  [[ -n "$SERVE_PID" ]] && { kill "$SERVE_PID" 2>/dev/null || true; wait "$SERVE_PID" 2>/dev/null || true; }
  rm -rf "$WORK"
}
trap cleanup EXIT

# The binary under test, copied before anything else (see tests/private-copy.sh).
# shellcheck source=tests/private-copy.sh
source "$ROOT/tests/private-copy.sh"
BIN="${WAVEGATE_RELEASE_BIN:-}"
if [[ -z "$BIN" ]]; then
  BIN="$ROOT/target/debug/wavegate"
  RELEASE="$ROOT/target/release/wavegate"
  # The newer build of the two. `-nt` is true when the debug binary is missing, as it is while
  # cargo links it anew: wait for it, and take the release one only when both are there.
  if ! appeared "$BIN"; then
    # No debug build at all (a checkout built for release only): the release one, if it was
    # built from these sources.
    [[ -x "$RELEASE" ]] || fail "neither $BIN nor $RELEASE exists: cargo build --bin wavegate, or name the binary in WAVEGATE_RELEASE_BIN"
    again="build it again (cargo build --release --bin wavegate), or name the binary in WAVEGATE_RELEASE_BIN"
    [[ -r "$RELEASE.d" ]] || fail "$RELEASE has no dep-info ($RELEASE.d) to tell what it was built from, and there is no debug build: $again"
    # Make's syntax, one line: `<binary>: <file> <file> …`, a space in a path written `\ `;
    # a path relative to the workspace with build.dep-info-basedir set.
    mapfile -t sources < <(sed -e '1!d' -e 's/\\ /\x01/g' -e 's/^[^ ]*: *//' "$RELEASE.d" | tr ' ' '\n' | tr '\001' ' ' | grep -v '^$' || true)
    (( ${#sources[@]} )) || fail "$RELEASE.d names no file $RELEASE was built from: $again"
    # Built here: a target directory copied from another checkout (or from a worktree inside
    # this one) names that checkout's sources, which exist and are older.
    here=0
    for source in "${sources[@]}"; do
      if [[ "$source" == "$ROOT/src/main.rs" || "$source" == src/main.rs ]]; then here=1; fi
    done
    (( here )) || fail "$RELEASE was not built from $ROOT/src/main.rs ($RELEASE.d names another checkout's sources): $again"
    for source in "${sources[@]}"; do
      [[ "$source" == /* ]] || source="$ROOT/$source"
      [[ -e "$source" ]] || fail "$RELEASE was built from ${source#"$ROOT"/}, which is gone, and there is no debug build: $again"
      if [[ "$source" -nt "$RELEASE" ]]; then
        fail "$RELEASE is older than ${source#"$ROOT"/} and there is no debug build: $again"
      fi
    done
    # Dependencies, features and profiles: cargo's dep-info names none of these. An edit that
    # changes nothing it builds (a comment) leaves the binary as old as it was: then
    # `touch src/main.rs` before building it again.
    for manifest in "$ROOT/Cargo.toml" "$ROOT/Cargo.lock"; do
      if [[ "$manifest" -nt "$RELEASE" ]]; then
        fail "$RELEASE is older than ${manifest#"$ROOT"/} and there is no debug build: $again (touch src/main.rs first if cargo finds nothing to rebuild)"
      fi
    done
    BIN="$RELEASE"
  elif [[ -x "$RELEASE" && "$RELEASE" -nt "$BIN" ]]; then
    BIN="$RELEASE"
  fi
fi
private_copy "$BIN" "$WORK/wavegate" || fail "no private copy of $BIN to test (above: why)"

# ------------------------------------------------------------- 1. actionlint ----
ACTIONLINT="$("$ROOT/scripts/tools.sh" path actionlint)"
ls "$ROOT"/.github/workflows/*.yml >/dev/null 2>&1 || fail "no workflow in .github/workflows"
"$ACTIONLINT" -version | head -n1 >&2
(cd "$ROOT" && "$ACTIONLINT" -no-color .github/workflows/*.yml) >"$OUT/actionlint.txt" 2>&1 \
  || { cat "$OUT/actionlint.txt" >&2; fail "actionlint found problems in .github/workflows"; }
pass "actionlint: $(cd "$ROOT" && ls .github/workflows/*.yml | tr '\n' ' ')clean"
mkdir -p "$WORK/broken/.github/workflows"
cat >"$WORK/broken/.github/workflows/broken.yml" <<'YAML'
on: {push: {tags: ["v*"]}}
jobs:
  x:
    runs-on: ubuntu-24.04
    steps:
      - run: echo "${{ github.event.no_such_context.ref }}"
      - uses: actions/checkout@v4
        with: {no-such-input: true}
YAML
if (cd "$WORK/broken" && "$ACTIONLINT" -no-color .github/workflows/broken.yml) >"$WORK/broken.txt" 2>&1; then
  fail "actionlint accepted a broken workflow"
fi
grep -q 'no-such-input' "$WORK/broken.txt" || { cat "$WORK/broken.txt" >&2; fail "actionlint did not name the unknown input"; }
pass "actionlint rejects a broken workflow ($(grep -c '^\.github' "$WORK/broken.txt") errors)"

# ------------------------------------------------------------------ 2. rootfs ----
# The Dockerfile's runtime base, named there; the packages below are what that image is made
# of (distroless's base: base-files, netbase, tzdata, ca-certificates; cc adds the C/C++ runtime
# and OpenSSL). Debian 12 is that image's release.
grep -q '^ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot$' "$ROOT/Dockerfile" \
  || fail "the Dockerfile's runtime base is no longer distroless/cc-debian12:nonroot: update this test's package list"
grep -q '^USER 65532:65532$' "$ROOT/Dockerfile" || fail "the Dockerfile no longer runs as 65532"
grep -q '^ENTRYPOINT \["/wavegate"\]$' "$ROOT/Dockerfile" || fail "the Dockerfile's entrypoint is no longer /wavegate"
[[ "$(. /etc/os-release && echo "$VERSION_ID")" == 12 ]] || fail "this test assembles Debian 12 packages; this machine is $(. /etc/os-release && echo "$PRETTY_NAME")"
PKGS=(base-files netbase tzdata ca-certificates libc6 libgcc-s1 libgomp1 libstdc++6 libssl3)
DEBS="$CACHE/debs/debian12"
mkdir -p "$DEBS"
missing=()
for p in "${PKGS[@]}"; do compgen -G "$DEBS/${p}_*.deb" >/dev/null || missing+=("$p"); done
if (( ${#missing[@]} )); then
  (cd "$DEBS" && apt-get download "${missing[@]}" >/dev/null 2>&1) || {
    apt-get update >/dev/null
    (cd "$DEBS" && apt-get download "${missing[@]}") >&2 || fail "apt-get download ${missing[*]} failed"
  }
fi
RFS="$WORK/rootfs"
mkdir -p "$RFS"
for p in "${PKGS[@]}"; do
  deb="$(ls -t "$DEBS/${p}"_*.deb | head -n1)"
  dpkg -x "$deb" "$RFS"
  echo "$(basename "$deb")" >>"$OUT/rootfs-packages.txt.tmp"
done
mv "$OUT/rootfs-packages.txt.tmp" "$OUT/rootfs-packages.txt"
# What the packages' maintainer scripts (never run by dpkg -x) and distroless's build add: the CA
# bundle update-ca-certificates would write, the users, /tmp and the nonroot home.
mkdir -p "$RFS/etc/ssl/certs" "$RFS/tmp" "$RFS/home/nonroot" "$RFS/proc" "$RFS/dev"
# The mount point of the kubeconfig volume (a container runtime creates volume mount points).
mkdir -p "$RFS/etc/wavegate/kube"
cat "$RFS"/usr/share/ca-certificates/mozilla/*.crt >"$RFS/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$RFS/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$RFS/etc/group"
chmod 1777 "$RFS/tmp"; chown 65532:65532 "$RFS/home/nonroot"
[[ -e "$RFS/usr/share/zoneinfo/UTC" && -e "$RFS/etc/services" && -s "$RFS/etc/ssl/certs/ca-certificates.crt" ]] \
  || fail "rootfs lacks zoneinfo, /etc/services or the CA bundle"

install -m 0755 "$WORK/wavegate" "$RFS/wavegate"
command -v strip >/dev/null && strip "$RFS/wavegate" 2>/dev/null || true
# No shell, no package manager: as in the distroless image.
[[ ! -e "$RFS/bin/sh" && ! -e "$RFS/usr/bin/apt-get" && ! -e "$RFS/usr/bin/dpkg" ]] || fail "the rootfs has a shell or a package manager"
log "rootfs: ${#PKGS[@]} Debian packages + /wavegate ($(basename "$(dirname "$(dirname "$BIN")")")/$(basename "$(dirname "$BIN")") build), $(du -sm "$RFS" | cut -f1) MB"
pass "rootfs assembled without a container engine ($(tr '\n' ' ' <"$OUT/rootfs-packages.txt"))"

# The shared local control plane, through a kubeconfig bind-mounted read-only.
eval "$("$ROOT/scripts/control-plane.sh" env)"
[[ -r "${KUBECONFIG:-}" ]] || fail "no kubeconfig from scripts/control-plane.sh env (is the control plane up?)"
mkdir -p "$WORK/kube"
cp "$KUBECONFIG" "$WORK/kube/config"
chmod 755 "$WORK" "$WORK/kube"; chmod 644 "$WORK/kube/config"
PORT="${WAVEGATE_RELEASE_PORT:-18290}"
setpriv --reuid=65532 --regid=65532 --clear-groups \
  bwrap --unshare-user --uid 65532 --gid 65532 --unshare-pid --unshare-ipc --die-with-parent \
    --ro-bind "$RFS" / --proc /proc --dev /dev \
    --ro-bind "$WORK/kube" /etc/wavegate/kube \
    --clearenv --setenv KUBECONFIG /etc/wavegate/kube/config --setenv HOME /home/nonroot \
    --chdir / -- /wavegate serve --listen "127.0.0.1:$PORT" \
  >"$OUT/serve.log" 2>&1 </dev/null &
SERVE_PID=$!
answer() { curl -s --max-time 2 -o "$WORK/body" -w '%{http_code}' "http://127.0.0.1:$PORT$1" 2>/dev/null || true; }
deadline=$(( $(date +%s) + 60 ))
until [[ "$(answer /healthz)" == 200 ]]; do
  kill -0 "$SERVE_PID" 2>/dev/null || { cat "$OUT/serve.log" >&2; fail "/wavegate serve exited in the rootfs"; }
  (( $(date +%s) < deadline )) || { tail -n 20 "$OUT/serve.log" >&2; fail "/healthz did not answer 200 within 60s"; }
  sleep 0.2
done
pass "/healthz 200 from the rootfs"

# The process really runs as 65532 on the host, its root is the assembled tree, read-only.
wg_pid="$(pgrep -f -u 65532 -x '/wavegate serve --listen 127.0.0.1:'"$PORT" | head -n1 || true)"
[[ -n "$wg_pid" ]] || wg_pid="$(pgrep -u 65532 -n wavegate || true)"
[[ -n "$wg_pid" ]] || fail "no wavegate process running as uid 65532"
read -r _ ruid euid _ < <(grep '^Uid:' "/proc/$wg_pid/status")
[[ "$ruid" == 65532 && "$euid" == 65532 ]] || fail "wavegate runs as uid $ruid/$euid on the host, want 65532"
root_opts="$(awk '$5 == "/" {print $6}' "/proc/$wg_pid/mountinfo" | tail -n1)"
[[ ",$root_opts," == *,ro,* ]] || fail "wavegate's / is mounted '$root_opts', want read-only"
[[ "$(readlink "/proc/$wg_pid/root")" == / && -e "/proc/$wg_pid/root/wavegate" && ! -e "/proc/$wg_pid/root/bin/sh" ]] \
  || fail "wavegate's root is not the assembled rootfs"
pass "runs as uid 65532 on the host (pid $wg_pid), / read-only ($root_opts), no shell in it"

deadline=$(( $(date +%s) + 60 ))
until [[ "$(answer /readyz)" == 200 ]]; do
  (( $(date +%s) < deadline )) || { tail -n 20 "$OUT/serve.log" >&2; fail "/readyz did not answer 200 within 60s: $(head -c 300 "$WORK/body")"; }
  sleep 0.2
done
pass "/readyz 200 (its caches synced with the control plane)"

# A health ask: the API server's own Service in `default`, judged from the watch caches.
code="$(answer /api/v1/health/services/default/kubernetes)"
[[ "$code" == 200 ]] || fail "health ask answered $code: $(head -c 300 "$WORK/body")"
python3 - "$WORK/body" <<'PY' || fail "health ask answered no verdict: $(head -c 300 "$WORK/body")"
import json, sys
v = json.load(open(sys.argv[1]))
assert v["status"] in ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"), v
assert "default/kubernetes" in v["message"], v
PY
pass "health ask: $(head -c 200 "$WORK/body")"

log "all $passed checks passed"
