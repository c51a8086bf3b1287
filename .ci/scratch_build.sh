# Sourced by sanitize.sh and valgrind.sh: copy the tracked tree into a
# scratch directory, cd there, build the extension in place with the caller's
# CFLAGS/LDFLAGS (any compiler warning fails), and point PYTHONPATH at it.
# Defines check_scratch_import for the caller.
# Sets root (the checkout) and tmp (the scratch copy, removed on exit).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && git ls-files -z | xargs -0 -I{} cp --parents {} "$tmp/")
cd "$tmp"
python setup.py -q build_ext --inplace > build.log 2>&1 || { cat build.log; exit 1; }
unset CFLAGS LDFLAGS     # the flags were for this build only (not, e.g., the packaging test)
if grep -E ": warning:" build.log; then echo "build has compiler warnings"; exit 1; fi
export PYTHONPATH="$tmp"

# Call once the environment is final (after LD_PRELOAD for ASan): the
# scratch build, not an installed posemb, is what Python imports.
check_scratch_import() {
  python -c "import posemb, os; f = posemb._core.__file__; \
assert f.startswith(os.environ['PYTHONPATH']), f; print('$1: posemb from', f)"
}
