#!/bin/bash
# dev.sh: sets glmchat up on a fresh Debian machine and runs it: `./dev.sh chat` builds and
# starts the chat; `./dev.sh test` builds and runs every test that needs no GPU.
set -euo pipefail
cd "$(dirname "$0")"

DEBIAN_PACKAGES="build-essential autoconf automake libtool pkg-config libncurses-dev
  libreadline-dev libcjson-dev libsqlite3-dev check libibverbs-dev libpcre2-dev tmux python3
  python3-jinja2 iproute2 nftables valgrind chromium groff-base man-db zsh bash-completion"

missing_packages() {
    local p missing=""
    for p in $DEBIAN_PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
    done
    echo "$missing"
}

install_packages() {
    local missing
    missing=$(missing_packages)
    [ -z "$missing" ] && return 0
    echo "dev.sh: installing Debian packages:$missing"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing
}

build() {
    install_packages
    [ -x configure ] || autoreconf -fi
    [ -f Makefile ] || ./configure ${GLMCHAT_CONFIGURE_FLAGS:-}
    make -j"$(nproc)"
}

# Prints Check's summary line of each suite and one total line for the whole run.
summarize_tests() {
    local logs passed failed
    logs=$(find tests -name '*.log' ! -name test-suite.log 2>/dev/null | sort)
    [ -n "$logs" ] && grep -h -E '^[0-9]+%: Checks: ' $logs || true
    read -r passed failed < <(find tests -name '*.trs' -exec cat {} + 2>/dev/null |
        awk '/^:test-result: PASS/ {p++} /^:test-result: (FAIL|ERROR)/ {f++} END {print p+0, f+0}')
    echo "${passed:-0} passed, ${failed:-0} failed"
}

case "${1:-chat}" in
chat)
    build
    shift || true
    exec ./glmchat "$@"
    ;;
test)
    build
    status=0
    make -j"$(nproc)" check || status=$?
    summarize_tests
    if [ "$status" -ne 0 ]; then
        find tests -name '*.log' ! -name test-suite.log -exec grep -l -E '^(FAIL|ERROR)' {} + 2>/dev/null |
            while read -r f; do echo "==== $f"; tail -n 40 "$f"; done
        cat test-suite.log 2>/dev/null | tail -n 60
    fi
    exit "$status"
    ;;
*)
    echo "usage: ./dev.sh chat [ARGS...] | ./dev.sh test" >&2
    exit 2
    ;;
esac
