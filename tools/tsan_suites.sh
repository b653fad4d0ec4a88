#!/usr/bin/env bash
# Hunt data races with ThreadSanitizer: tinycoro's runtime suites on a free-threaded CPython built
# with --with-thread-sanitizer, tinycoro's own modules compiled with -fsanitize=thread, the GIL
# off. Every report is collected under $out (default /tmp/tinycoro-tsan), one file per process,
# and summarised at the end by the frame that names tinycoro, or as CPython's own.
#
#   tools/tsan_suites.sh                        -> every runtime suite of .ci/run (hours on 2 cores)
#   tools/tsan_suites.sh tests/test_ft_stress.py tests/test_sync_event.py   -> just those
#   TINYCORO_PURE=1 tools/tsan_suites.sh ...    -> the pure-Python runtime on the same interpreter
#
# The interpreter comes from tools/build_freethreaded_python.sh (TINYCORO_FT_VARIANT=tsan, cached
# under ~/.cache/tinycoro; the first build takes long). tinycoro is installed into its own venv
# ($TINYCORO_TSAN_VENV, default ~/.cache/tinycoro/venv-tsan) from a copy of this tree, not in
# place: an editable build would put TSan-instrumented modules beside the sources, where the
# ordinary free-threaded venv would load them (the two share one ABI tag, cpython-313t).
#
# Suppressions (tools/tsan_suppressions.txt) are for CPython's own internals only, each with its
# reason; CPython ships its own list of known races in its source (Tools/tsan/), which is
# appended at run time. Nothing of tinycoro's is ever suppressed: a report that names a
# tinycoro frame is fixed, or explained in docs/design.md's "Synchronisation" section.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TINYCORO_FT_CACHE:-$HOME/.cache/tinycoro}
venv=${TINYCORO_TSAN_VENV:-$cache/venv-tsan}
out=${TINYCORO_TSAN_OUT:-/tmp/tinycoro-tsan}
log() { echo "tsan_suites: $*" >&2; }

python=$(TINYCORO_FT_VARIANT=tsan "$root/tools/build_freethreaded_python.sh")
cpython_src=$(ls -d "$cache"/src/upstream-3.13.*/ 2>/dev/null | sort -V | tail -n1 || true)

if [ ! -x "$venv/bin/python" ]; then
    log "making $venv"
    "$python" -m venv "$venv"
    # hypothesis: its newer releases build a Rust part on 3.13t (no wheel); 6.150.0 is pure
    # The build's own requirements too: tinycoro is built without isolation (below), so that
    # a cached wheel of the binding ($cache/wheels-ft, the same ABI) is used, not rebuilt.
    "$venv/bin/python" -m pip install -q --find-links "$cache/wheels-ft" hypothesis==6.150.0 \
        pytest pytest-timeout Cython setuptools "liburing==2024.5.3"
fi
# Installed from a copy, so that nothing is built into this tree (header comment).
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
git -C "$root" ls-files -z --cached --others --exclude-standard | (cd "$root" && xargs -0 cp --parents -t "$stage")
log "building tinycoro with -fsanitize=thread"
CFLAGS="-fsanitize=thread -g -O1 -fno-omit-frame-pointer" LDFLAGS="-fsanitize=thread" \
    "$venv/bin/python" -m pip install -q --force-reinstall --no-deps --no-build-isolation "$stage" >&2

if [ $# -eq 0 ]; then  # every runtime suite, as .ci/run lists them
    eval "$(sed -n '/^RUNTIME_SUITES=(/,/^)/p' "$root/.ci/run")"
    set -- "${RUNTIME_SUITES[@]}"
fi
files=()
for f in "$@"; do files+=("$root/$f"); done

rm -rf "$out" && mkdir -p "$out"
supp="$out/suppressions.txt"
cat "$root/tools/tsan_suppressions.txt" > "$supp"
if [ -n "$cpython_src" ] && [ -f "$cpython_src/Tools/tsan/suppressions_free_threading.txt" ]; then
    echo "# --- appended: CPython's own list ($cpython_src/Tools/tsan/) ---" >> "$supp"
    cat "$cpython_src/Tools/tsan/suppressions_free_threading.txt" >> "$supp"
fi
log "running ${#files[@]} file(s) with the GIL off; reports in $out"
# halt_on_error=0: collect every report of a run; exitcode=0: a report is read from the
# logs below, not from a test's exit status (a child process's report would fail it twice).
rc=0
(cd "$out" && PYTHON_GIL=0 \
    TSAN_OPTIONS="suppressions=$supp halt_on_error=0 exitcode=0 report_signal_unsafe=0 second_deadlock_stack=1 log_path=$out/report" \
    "$venv/bin/python" -m pytest -p no:cacheprovider -o addopts= --rootdir "$root" -q \
        --timeout "${TINYCORO_TSAN_TIMEOUT:-1800}" "${files[@]}") || rc=$?

# Summary: each report by the first stack frame in tinycoro's code, else "CPython/other".
"$venv/bin/python" - "$out" <<'EOF'
import collections, glob, re, sys
out = sys.argv[1]
seen = collections.Counter()
for path in sorted(glob.glob(f"{out}/report.*")):
    text = open(path, errors="replace").read()
    for rep in re.split(r"^={10,}$", text, flags=re.M):
        m = re.search(r"WARNING: ThreadSanitizer: ([^(\n]+)", rep)
        if not m:
            continue
        frames = re.findall(r"#\d+ (\S+) (\S+)", rep)
        ours = [f"{fn} {loc}" for fn, loc in frames if "tinycoro" in loc]
        seen[(m.group(1).strip(), ours[0] if ours else "CPython/other: " + (frames[0][0] if frames else "?"))] += 1
print(f"tsan_suites: {sum(seen.values())} report(s) in {out}")
for (kind, where), n in seen.most_common():
    print(f"  {n:4d}  {kind}  at {where}")
EOF
exit $rc
