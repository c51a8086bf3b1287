#!/usr/bin/env bash
# The README's first command exactly as a new user runs it: from the root of a
# fresh clone of this checkout's HEAD, in a fresh virtual environment (no
# posemb, no build outputs, nothing installed by hand).  The command is read
# from README.md (the first ```bash block under "## Install and run"), so the
# README cannot drift from what CI runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmd=$(python - "$root/README.md" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
section = text.split("## Install and run", 1)[1]
print(re.search(r"```bash\n(.*?)\n```", section, re.S).group(1).strip())
PY
)
echo "fresh clone: $cmd"
git clone -q "$root" "$tmp/posemb"
python -m venv "$tmp/venv"
cd "$tmp/posemb"
# a subshell with the venv first on PATH, as `source venv/bin/activate` gives
(export VIRTUAL_ENV="$tmp/venv" PATH="$tmp/venv/bin:$PATH"; unset PYTHONPATH PYTHONHOME
 bash -euo pipefail -c "$cmd" > "$tmp/out.log" 2>&1) || { cat "$tmp/out.log"; exit 1; }
tail -n 12 "$tmp/out.log"
grep -q "verdict: OK" "$tmp/out.log" || { echo "fresh clone: no 'verdict: OK' in the output"; exit 1; }
# the unbuilt source tree of a second clone says what to run, not a circular import
git clone -q "$root" "$tmp/unbuilt"
msg=$(cd "$tmp/unbuilt" && "$tmp/venv/bin/python" -c "import posemb" 2>&1 || true)
grep -q "pip install -e ." <<<"$msg" || { echo "unbuilt tree import said: $msg"; exit 1; }
echo "fresh clone: README's first command OK; unbuilt tree gives the clear ImportError"
