#!/usr/bin/env bash
# Build a free-threaded CPython 3.13 (--disable-gil) from Debian's source package and cache it.
#   tools/build_freethreaded_python.sh            -> prints the interpreter's path
#   TINYCORO_FT_VARIANT=tsan tools/build_...      -> a ThreadSanitizer build (--with-thread-sanitizer)
# Debian's trixie suite serves python3.13 3.13.x as a source package; this machine's apt sources
# name bookworm only, so a deb-src entry for trixie on the same mirror is added (source only:
# nothing is installed from trixie). The build is cached under ~/.cache/tinycoro (or
# $TINYCORO_FT_CACHE): a second run with the same variant prints the cached path at once.
#
# What is built is the upstream tarball the source package carries (its .orig.tar.xz) with
# Debian's security fixes (its CVE-* patches, in the series' order), not Debian's whole patch
# series: Debian's layout patches (deb-locations, sysconfig-debian-schemes, ...) move
# site-packages to dist-packages paths without the "t" of a free-threaded build, so a venv made
# from such an interpreter never puts its own site-packages on sys.path (pip is not importable
# in it). A cached build of that kind is detected and rebuilt.
set -euo pipefail
variant=${TINYCORO_FT_VARIANT:-release}
cache=${TINYCORO_FT_CACHE:-$HOME/.cache/tinycoro}
prefix="$cache/python3.13t-$variant"
python="$prefix/bin/python3.13t"
# Usable: free-threaded, the modules the suites need, and a venv made from it that puts its own
# site-packages on sys.path (what a Debian-patched layout breaks).
usable() {
    local venv rc=0
    "$python" -c 'import sys, ssl, sqlite3; assert not sys._is_gil_enabled()' || return 1
    venv=$(mktemp -d)
    "$python" -m venv --without-pip "$venv" &&
        "$venv/bin/python" -c 'import site, sysconfig, sys
assert sysconfig.get_path("purelib") in sys.path, (sysconfig.get_path("purelib"), sys.path)' || rc=1
    rm -rf "$venv"
    return $rc
}
if [ -x "$python" ] && usable 2>/dev/null; then
    echo "$python"; exit 0
fi
log() { echo "build_freethreaded_python: $*" >&2; }
mkdir -p "$cache/src"
if ! ls "$cache"/src/python3.13_3.13.*.orig.tar.xz "$cache"/src/python3.13_3.13.*.debian.tar.xz >/dev/null 2>&1; then
    mirror=$(grep -hoE 'https?://[^ ]+/debian/?$' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -n1 || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    list=/etc/apt/sources.list.d/tinycoro-trixie-src.list
    if [ ! -f "$list" ]; then
        [ "$(id -u)" = 0 ] || { log "need root to add a deb-src entry ($list)"; exit 1; }
        echo "deb-src [trusted=yes] ${mirror%/} trixie main" > "$list"
    fi
    log "fetching python3.13's source package from $mirror (trixie)"
    apt-get update -q -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- \
        -o APT::Get::List-Cleanup=0 </dev/null >&2
    (cd "$cache/src" && apt-get source --download-only -q python3.13 </dev/null >&2)
fi
orig=$(ls "$cache"/src/python3.13_3.13.*.orig.tar.xz | sort -V | tail -n1)
upstream=$(basename "$orig" .orig.tar.xz)  # python3.13_3.13.5
src="$cache/src/upstream-${upstream#python3.13_}"
if [ ! -f "$src/.tinycoro-patched" ]; then
    log "unpacking $(basename "$orig") and applying Debian's CVE patches"
    rm -rf "$src" "$src.tmp" && mkdir -p "$src.tmp"
    tar -xf "$orig" -C "$src.tmp" --strip-components=1
    tar -xf "$(ls "$cache"/src/"$upstream"-*.debian.tar.xz | sort -V | tail -n1)" -C "$src.tmp" debian/patches
    while read -r p; do
        (cd "$src.tmp" && patch -s -p1 -N < "debian/patches/$p" >&2) || { log "patch $p does not apply"; exit 1; }
    done < <(grep -E '^CVE-' "$src.tmp/debian/patches/series")
    touch "$src.tmp/.tinycoro-patched" && mv "$src.tmp" "$src"
fi
# The libraries of the modules the suites need (ssl, sqlite3, ctypes, zlib, ...): installed
# from the machine's own suite when missing and we are root; without them the check below fails.
deps=(build-essential libssl-dev libsqlite3-dev libffi-dev zlib1g-dev libbz2-dev liblzma-dev
      libreadline-dev libncurses-dev uuid-dev xz-utils patch)
if ! dpkg -s "${deps[@]}" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        log "installing the build's libraries: ${deps[*]}"
        apt-get update -q </dev/null >&2 &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${deps[@]}" </dev/null >&2
    else
        log "some of ${deps[*]} are missing (apt-get install them as root); building anyway"
    fi
fi
build="$cache/build-$variant"
stage="$cache/stage-$variant"
rm -rf "$build" "$stage" && mkdir -p "$build"
flags=(--disable-gil --prefix="$prefix" --without-ensurepip)
[ "$variant" = tsan ] && flags+=(--with-thread-sanitizer)
log "configuring ($variant) in $build"
(cd "$build" && "$src/configure" -q "${flags[@]}" >&2)
log "building with $(nproc) jobs (about 6 minutes on 2 cores)"
# Installed into a staging root, then moved into place: an interpreter (and venvs made from
# it) at $prefix is never half-replaced while the build runs.
(cd "$build" && make -s -j"$(nproc)" >&2 && make -s install DESTDIR="$stage" >&2)
rm -rf "$prefix" && mv "$stage$prefix" "$prefix" && rm -rf "$stage"
# pip for the interpreter itself (a venv made from it installs its own with ensurepip)
"$python" -m ensurepip --default-pip >&2
usable || { log "the built interpreter is not usable (GIL on, or a module missing)"; exit 1; }
echo "$python"
