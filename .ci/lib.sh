# Shared by .ci/demo and .ci/test: install what is missing, configure, build.
# Sourced, not run. Works from a fresh clone on Debian 12 as root (or with sudo).

HS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HS_JOBS=${HS_JOBS:-$(nproc 2>/dev/null || echo 2)}

# Packages to build and run heapstore.
HS_PKGS_BUILD="build-essential cmake pkg-config libsqlite3-dev libuv1-dev libunwind-dev
  libjansson-dev libdw-dev libelf-dev libcmocka-dev zlib1g-dev libzstd-dev
  libcurl4-openssl-dev python3 sqlite3"
# Packages the test suite adds: fuzzers (clang), pprof (golang-go), the browser tests,
# libdebuginfod1 (so that the test that the collector never asks debuginfod can fail),
# ClickHouse for the ClickHouse store's tests (tests/clickhouse start their own servers).
HS_PKGS_TEST="clang libclang-rt-14-dev golang-go chromium nodejs npm libdebuginfod1
  clickhouse-server clickhouse-client"

hs_log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

hs_install() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    # Node.js may come from outside Debian's packages; keep it if it works.
    if command -v node >/dev/null && command -v npm >/dev/null; then
        local keep=() m
        for m in "${missing[@]}"; do case $m in nodejs|npm) ;; *) keep+=("$m") ;; esac; done
        missing=("${keep[@]}")
        [ ${#missing[@]} -eq 0 ] && return 0
    fi
    hs_log "installing: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
}

# hs_build DIR [cmake args…]: configure (once) and build.
hs_build() {
    local dir=$1
    shift
    hs_log "building $dir $*"
    cmake -S "$HS_ROOT" -B "$HS_ROOT/$dir" "$@" >/dev/null &&
        cmake --build "$HS_ROOT/$dir" -j "$HS_JOBS" >/dev/null
}
