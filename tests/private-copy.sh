# Sourced by the tests that run the wavegate binary (tests/monitoring, tests/argocd, tests/release).
#
# private_copy SRC DEST: DEST, a copy of SRC made once, for a test to run instead of SRC. SRC is
# cargo's target/debug/wavegate, which another lane of scripts/test.sh (or a build in the same
# checkout) may be linking anew while the test runs: cargo removes the old file before it puts
# the new one in place, so SRC can be missing for a moment (the monitoring check once found it
# so), and every later run of it can be a different build than the test began with. Retried for
# 10 s while SRC is missing; on failure, says on stderr what failed.
private_copy() {
  local src="$1" dest="$2" why present=0 _
  for _ in $(seq 1 50); do
    why="$(install -m 0755 "$src" "$dest" 2>&1)" && return 0
    # A missing SRC is waited for, and so is one that was missing when install opened it and
    # is back now (cargo put the new build in place meanwhile): only a failure with SRC there
    # at two looks running (no space, DEST's directory gone) stays.
    if [[ -e "$src" ]]; then
      present=$((present + 1))
      ((present >= 2)) && break
    else
      present=0
    fi
    sleep 0.2
  done
  if [[ -e "$src" ]]; then
    echo "cannot copy $src to $dest: $why" >&2
  else
    echo "$src is missing after 10 s (cargo build --bin wavegate)" >&2
  fi
  return 1
}

# appeared SRC: true once SRC exists, waiting up to 10 s while it is missing (being linked anew).
appeared() {
  local src="$1" _
  for _ in $(seq 1 50); do
    [[ -e "$src" ]] && return 0
    sleep 0.2
  done
  return 1
}
