#!/usr/bin/env bash
# The trust check of the nightly path on a busy machine (a busy loop beside the benches):
# A/A with one launch a side and with --repeat 3 a side must confirm nothing (exit 0), and the
# interleaved MPICH recexch A/B must still be flagged at the large all_reduce sizes only.
# Usage: scripts/trust_check.sh [OUT_DIR]   (about 15-25 minutes on 2 cores)
set -u
out=${1:-$(mktemp -d /tmp/trust-XXXX)}
mkdir -p "$out"
cd "$(dirname "$0")/.."
python3 -c 'while True: pass' &
busy=$!
trap 'kill $busy 2>/dev/null' EXIT
sweep=(benches/test_collectives.py --benchmark --backend gloo,mpi --ops all_reduce,all_gather --sizes 4:4M:4 -q -p no:randomly)
verdict() {  # label, compare arguments...
  local label=$1; shift
  hccl-bench compare "$@" > "$out/$label.txt" 2>&1
  local rc=$?
  echo "== $label: exit $rc"
  grep -E "^# [0-9]+ cells|^REGRESSIONS|^improvements|^suspected|^  " "$out/$label.txt" | head -20
}
for n in 1 3; do
  for side in a b; do
    python3 -m pytest "${sweep[@]}" --repeat $n --results "$out/aa$n-$side" > "$out/aa$n-$side.log" 2>&1
    echo "A/A --repeat $n side $side: pytest exit $?"
  done
  verdict "aa-repeat$n" "$out"/aa$n-a/*/ "$out"/aa$n-b/*/
done
python3 -m pytest benches/test_collectives.py --benchmark --backend mpi --ops all_reduce,all_gather --sizes 4:4M:4 -q \
  -p no:randomly --repeat 6 --results "$out/recexch" \
  --ab-env MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=recexch,MPIR_CVAR_ALLREDUCE_DEVICE_COLLECTIVE=0 > "$out/recexch.log" 2>&1
echo "recexch A/B: pytest exit $?"
verdict "recexch-ab" "$out"/recexch/*/ --ab
echo "# everything is in $out"
