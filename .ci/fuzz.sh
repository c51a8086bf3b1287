#!/usr/bin/env bash
# The long fuzz run (not part of the quick pytest suite): the API fuzzer
# (tests/fuzz_api.py) and the differential fuzzer (tests/fuzz_diff.py), each
# in child processes of POSEMB_FUZZ_CHUNK cases (default 20,000) until
# POSEMB_FUZZ_TOTAL cases (default 100,000) have run, every child under an
# address-space cap (RLIMIT_AS, set by the fuzzer itself: what it uses after
# import + POSEMB_FUZZ_MEMORY bytes) and a per-case watchdog
# (POSEMB_FUZZ_CASE_TIMEOUT seconds).  Counts crashes (killed by a signal),
# hangs (watchdog exit 3, the case printed), out-of-memory kills (SIGKILL)
# and failures; any of them fails the run.  Usage: bash .ci/fuzz.sh [seed]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
total=${POSEMB_FUZZ_TOTAL:-100000}
chunk=${POSEMB_FUZZ_CHUNK:-20000}
seed0=${1:-0}
export POSEMB_FUZZ_CASE_TIMEOUT=${POSEMB_FUZZ_CASE_TIMEOUT:-60}
log=$(mktemp -d)
crashes=0 hangs=0 oom=0 failures=0 cases=0 returned=0 raised=0 dcases=0 dfail=0
for script in fuzz_api fuzz_diff; do
    done_=0 k=0
    while [ "$done_" -lt "$total" ]; do
        n=$(( total - done_ < chunk ? total - done_ : chunk ))
        seed=$(( seed0 * 1000 + k ))
        out="$log/$script.$seed"
        POSEMB_FUZZ_CURRENT="$out.current" timeout 7200 \
            python -W ignore "tests/$script.py" "$n" "$seed" >"$out.out" 2>"$out.err"
        rc=$?
        if [ "$rc" -eq 3 ]; then
            hangs=$((hangs + 1)); echo "HANG ($script seed $seed): $(cat "$out.current")"
        elif [ "$rc" -eq 137 ] || [ "$rc" -eq 124 ]; then
            oom=$((oom + 1)); echo "KILLED ($script seed $seed, rc $rc): $(cat "$out.current" 2>/dev/null)"
        elif [ "$rc" -gt 128 ]; then
            crashes=$((crashes + 1)); echo "CRASH ($script seed $seed, signal $((rc - 128))): $(cat "$out.current" 2>/dev/null)"
        fi
        if [ "$script" = fuzz_api ]; then
            line=$(grep -E '^fuzz cases:' "$out.out" | tail -1)
            if [ -n "$line" ]; then
                set -- $line
                cases=$((cases + $3)); returned=$((returned + $5)); raised=$((raised + $7))
                failures=$((failures + $9))
            fi
        else
            line=$(grep -E '^diff cases:' "$out.out" | tail -1)
            if [ -n "$line" ]; then
                set -- $line
                dcases=$((dcases + $3)); dfail=$((dfail + $5))
            fi
        fi
        grep -E '^case ' -A1 "$out.out" | head -40
        done_=$((done_ + n)) k=$((k + 1))
    done
done
echo "api fuzz: cases $cases returned $returned raised $raised failures $failures"
echo "differential fuzz: cases $dcases failures $dfail"
echo "crashes $crashes hangs $hangs oom-kills $oom"
[ "$failures" -eq 0 ] && [ "$dfail" -eq 0 ] && [ "$crashes" -eq 0 ] && [ "$hangs" -eq 0 ] \
    && [ "$oom" -eq 0 ] && [ "$cases" -ge "$total" ] && [ "$dcases" -ge "$total" ]
