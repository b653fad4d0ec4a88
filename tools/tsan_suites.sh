#!/usr/bin/env bash
# Hunt data races with ThreadSanitizer: tinycoro's runtime suites on a free-threaded CPython built
# with --with-thread-sanitizer, tinycoro's own modules compiled with -fsanitize=thread, the GIL
# off. Slow (TSan costs 5-15x), so not part of .ci/run: run it by hand, in chunks.
#
#   tools/tsan_suites.sh                        -> every runtime suite of .ci/run (hours on 2 cores)
#   tools/tsan_suites.sh tests/test_ft_stress.py tests/test_sync_event.py   -> just those
#   tools/tsan_suites.sh -x -k mutex tests/test_sync_mutex.py   -> options go to pytest as given
#   TINYCORO_PURE=1 tools/tsan_suites.sh ...    -> the pure-Python runtime on the same interpreter
#   python3 tools/tsan_summary.py /tmp/tinycoro-tsan   -> the summary of the last run, again
#
# Environment: TINYCORO_TSAN_OUT (reports, default /tmp/tinycoro-tsan; the last run's go first),
# TINYCORO_TSAN_VENV (default ~/.cache/tinycoro/venv-tsan), TINYCORO_TSAN_TIMEOUT (pytest's per
# test timeout, default 1800 s), TINYCORO_TSAN_TIMEOUT_SCALE (a test's own timeout mark times
# this, default 10: tools/tsan_pytest.py), TINYCORO_FT_ROUNDS (scales tests/test_ft_stress.py's
# counts).
#
# Output: pytest's, then a count of reports by their top tinycoro frame (the .py line Cython
# compiled it from), then the reports in CPython, the binding or libc by their top frame, then
# the suppressions that matched. Exit status: 0 when the tests passed and no unsuppressed report
# names tinycoro; otherwise pytest's own status, or 1 for a report (the summary says which).
#
# The interpreter comes from tools/build_freethreaded_python.sh (TINYCORO_FT_VARIANT=tsan, cached
# under ~/.cache/tinycoro; the first build takes long). tinycoro is installed into its own venv
# from a copy of this tree, not in place: an editable build would put TSan-instrumented modules
# beside the sources, where the ordinary free-threaded venv would load them (the two share one
# ABI tag, cpython-313t). It is rebuilt only when the tree's files changed since the last run.
#
# Suppressions (tools/tsan_suppressions.txt): each narrow (one function), each with a one-line
# reason, and every tinycoro one is in docs/freethreading-tsan.md's findings table. CPython's own
# list of known races in its source (Tools/tsan/) is appended at run time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TINYCORO_FT_CACHE:-$HOME/.cache/tinycoro}
venv=${TINYCORO_TSAN_VENV:-$cache/venv-tsan}
out=${TINYCORO_TSAN_OUT:-/tmp/tinycoro-tsan}
log() { echo "tsan_suites: $*" >&2; }

python=$(TINYCORO_FT_VARIANT=tsan "$root/tools/build_freethreaded_python.sh")
cpython_src=$(ls -d "$cache"/src/upstream-3.13.*/ 2>/dev/null | sort -V | tail -n1 || true)

# A venv is used only once made whole (the stamp): an interrupted pip leaves none behind.
if [ ! -f "$venv/.tinycoro-ready" ]; then
    log "making $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    # hypothesis: its newer releases build a Rust part on 3.13t (no wheel); 6.150.0 is pure.
    # The build's own requirements too: tinycoro is built without isolation (below), so that
    # a cached wheel of the binding ($cache/wheels-ft, the same ABI) is used, not rebuilt.
    "$venv/bin/python" -m pip install -q --find-links "$cache/wheels-ft" hypothesis==6.150.0 \
        pytest pytest-timeout pytest-xdist Cython setuptools "liburing==2024.5.3"
    touch "$venv/.tinycoro-ready"
fi

out=$(mkdir -p "$out" && cd "$out" && pwd)
rm -rf "$out"/report.* "$out/csrc" "$out/suppressions.txt" && mkdir -p "$out/csrc"  # the last run's
# Installed from a copy, so that nothing is built into this tree (header comment); skipped when
# the files are those of the last install.
files_hash=$(cd "$root" && git ls-files -z --cached --others --exclude-standard -- tinycoro setup.py pyproject.toml |
    xargs -0 sha1sum 2>/dev/null | sha1sum | cut -c1-40)
if [ "$(cat "$venv/.tinycoro-built" 2>/dev/null)" != "$files_hash" ] || [ ! -d "$venv/csrc" ]; then
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    git -C "$root" ls-files -z --cached --others --exclude-standard | (cd "$root" && xargs -0 cp --parents -t "$stage" 2>/dev/null || true)
    # Cython and the C compiler run on the cached release interpreter when there is one (the
    # same ABI, cpython-313t; under TSan's interpreter the build takes several times longer),
    # in a build venv of its own; the wheel goes into the TSan venv.
    builder=$venv
    release="$cache/python3.13t-release/bin/python3.13t"
    if [ -x "$release" ]; then
        builder="$cache/venv-tsan-build"
        if [ ! -f "$builder/.tinycoro-ready" ]; then
            rm -rf "$builder" && "$release" -m venv "$builder"
            "$builder/bin/python" -m pip install -q --find-links "$cache/wheels-ft" Cython setuptools wheel "liburing==2024.5.3"
            touch "$builder/.tinycoro-ready"
        fi
    fi
    log "building tinycoro with -fsanitize=thread"
    rm -f "$venv/.tinycoro-built"
    (cd "$stage" && CFLAGS="-fsanitize=thread -g -fno-omit-frame-pointer" LDFLAGS="-fsanitize=thread" \
        "$builder/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$stage/.wheel" . >&2)
    "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$stage"/.wheel/*.whl >&2
    # the generated C, for the summary's map from a C line to the .py line it came from
    rm -rf "$venv/csrc" && mkdir -p "$venv/csrc"
    (cd "$stage" && find tinycoro -name '*.c' -print0 | xargs -0 -r cp --parents -t "$venv/csrc")
    echo "$files_hash" > "$venv/.tinycoro-built"
fi
if [ -z "${TINYCORO_PURE:-}" ]; then  # a module that failed to compile would run interpreted
    (cd "$out" && PYTHON_GIL=0 "$venv/bin/python" -c 'import tinycoro
from tinycoro import compiled
assert not compiled.fallbacks, compiled.describe()') >&2 || { log "tinycoro did not install compiled"; exit 1; }
fi
cp -r "$venv/csrc/." "$out/csrc/"

files=() opts=()
for a in "$@"; do
    case $a in
        -*) opts+=("$a") ;;
        *) if [ -e "$root/${a%%::*}" ]; then files+=("$root/$a"); else opts+=("$a"); fi ;;
    esac
done
if [ ${#files[@]} -eq 0 ]; then  # every runtime suite, as .ci/run lists them
    eval "$(sed -n '/^RUNTIME_SUITES=(/,/^)/p' "$root/.ci/run")"
    for f in "${RUNTIME_SUITES[@]}"; do files+=("$root/$f"); done
fi

supp="$out/suppressions.txt"
cat "$root/tools/tsan_suppressions.txt" > "$supp"
if [ -n "$cpython_src" ] && [ -f "$cpython_src/Tools/tsan/suppressions_free_threading.txt" ]; then
    echo "# --- appended: CPython's own list ($cpython_src/Tools/tsan/) ---" >> "$supp"
    cat "$cpython_src/Tools/tsan/suppressions_free_threading.txt" >> "$supp"
fi
log "running ${#files[@]} file(s) with the GIL off; reports in $out"
# halt_on_error=0: collect every report of a run; exitcode=0: a report is read from the
# logs below, not from a test's exit status (a child process's report would fail it twice);
# history_size=4: more of each thread's past accesses kept, so that fewer reports have a
# "failed to restore the stack" side, which no suppression can match.
rc=0
# tools/tsan_pytest.py: each test's own timeout mark scaled for TSan's slowness
(cd "$out" && PYTHON_GIL=0 PYTHONPATH="$root/tools${PYTHONPATH:+:$PYTHONPATH}" \
    TSAN_OPTIONS="suppressions=$supp halt_on_error=0 exitcode=0 report_signal_unsafe=0 second_deadlock_stack=1 history_size=4 print_suppressions=1 log_path=$out/report" \
    "$venv/bin/python" -m pytest -p no:cacheprovider -p tsan_pytest -o addopts= --rootdir "$root" -q \
        --timeout "${TINYCORO_TSAN_TIMEOUT:-1800}" "${opts[@]}" "${files[@]}") || rc=$?
[ $rc -eq 0 ] || log "pytest exited $rc"
python3 "$root/tools/tsan_summary.py" "$out" || rc=1
exit $rc
