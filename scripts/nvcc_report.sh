#!/usr/bin/env bash
# The kernels' compile launcher (kernels/CMakeLists.txt): runs the compile command it is given with
# ptxas's report (-Xptxas -v) kept beside the object as <object>.ptxas instead of in the build log, so
# scripts/kernel_resources.py reads what the build compiled rather than compiling every kernel again.
set -uo pipefail
obj=""
prev=""
for a in "$@"; do
  [[ "$prev" == "-o" ]] && obj="$a"
  prev="$a"
done
log="$(mktemp)"
"$@" -Xptxas -v 2>"$log"
rc=$?
if [[ $rc -ne 0 || -z "$obj" ]]; then
  cat "$log" >&2
else
  cp "$log" "$obj.ptxas"
  # Everything but ptxas's own lines still reaches the build log (warnings above all).
  grep -v -E '^(ptxas info|    [0-9]+ bytes stack frame)' "$log" >&2
fi
rm -f "$log"
exit $rc
