#!/usr/bin/env bash
# Build a free-threaded CPython 3.13 (--disable-gil) from Debian's source package and cache it.
#   tools/build_freethreaded_python.sh            -> prints the interpreter's path
#   TINYCORO_FT_VARIANT=tsan tools/build_...      -> a ThreadSanitizer build (--with-thread-sanitizer)
# Debian's trixie suite serves python3.13 3.13.x as a source package; this machine's apt sources
# name bookworm only, so a deb-src entry for trixie on the same mirror is added (source only:
# nothing is installed from trixie). The build is cached under ~/.cache/tinycoro (or
# $TINYCORO_FT_CACHE): a second run with the same variant prints the cached path at once.
set -euo pipefail
variant=${TINYCORO_FT_VARIANT:-release}
cache=${TINYCORO_FT_CACHE:-$HOME/.cache/tinycoro}
prefix="$cache/python3.13t-$variant"
python="$prefix/bin/python3.13t"
if [ -x "$python" ] && "$python" -c 'import sys, ssl, sqlite3; assert not sys._is_gil_enabled()' 2>/dev/null; then
    echo "$python"; exit 0
fi
log() { echo "build_freethreaded_python: $*" >&2; }
mkdir -p "$cache/src"
if ! ls -d "$cache"/src/python3.13-3.13.*/ >/dev/null 2>&1; then
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
    (cd "$cache/src" && dpkg-source --no-check -x python3.13_*.dsc >&2)
fi
src=$(ls -d "$cache"/src/python3.13-3.13.*/ | head -n1)
build="$cache/build-$variant"
rm -rf "$build" && mkdir -p "$build"
flags=(--disable-gil --prefix="$prefix" --without-ensurepip --with-ensurepip=no)
[ "$variant" = tsan ] && flags+=(--with-thread-sanitizer)
[ "$variant" = release ] && flags+=(--enable-optimizations=no)
log "configuring ($variant) in $build"
(cd "$build" && "$src/configure" -q "${flags[@]}" >&2)
log "building with $(nproc) jobs (about 6 minutes on 2 cores)"
(cd "$build" && make -s -j"$(nproc)" >&2 && make -s install >&2)
"$python" -m ensurepip -q >&2 2>&1 || true
"$python" -c 'import sys, ssl; assert not sys._is_gil_enabled()' || { log "built interpreter has the GIL on"; exit 1; }
echo "$python"
