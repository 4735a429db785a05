#!/usr/bin/env python3
"""Registers, spills and shared memory of every kernel in kernels/, per GPU architecture.

A kernel that spills registers to local memory runs slower than one that
does not, and a CPU-only machine cannot time it: this is what it can see.
The build keeps ptxas's report (`-Xptxas -v`) of each kernels/*.cu beside
its object (<object>.ptxas, scripts/nvcc_report.sh); where one is missing or
older than its object, or with --compile, the file is compiled again with the
build's own nvcc command (build/compile_commands.json, so the same flags and
-gencode targets) plus `-Xptxas -v`. The report is printed as a table.

  python3 scripts/kernel_resources.py [--build build] [--spills-only] [--compile]
  python3 scripts/kernel_resources.py --check [--allow REGEX BYTES ...]

--check exits 1 when a kernel spills, except a kernel whose "ARCH NAME"
(e.g. "sm_90 void add_norm_backward_kernel<float, float, float, 64>(...)")
matches an --allow REGEX and spills at most BYTES; the ctest case
"kernels: no register spills" runs it so that a change that makes a kernel
spill fails CI even though CI has no GPU.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
USAGE = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


def fail(message):
    print(f"kernel_resources: {message}", file=sys.stderr)
    sys.exit(2)


def kernel_commands(build):
    path = os.path.join(build, "compile_commands.json")
    if not os.path.isfile(path):
        fail(f"{path} not found: configure and build first (scripts/build.sh)")
    with open(path) as f:
        entries = json.load(f)
    cu = [e for e in entries if e["file"].endswith(".cu") and f"{os.sep}kernels{os.sep}" in e["file"]]
    if not cu:
        fail(f"{path} has no kernels/*.cu: the build has no CUDA kernels (GPUTRAIN_WITH_CUDA is off)")
    return sorted(cu, key=lambda e: e["file"])


def kept_report(entry):
    """The build's own ptxas lines for one translation unit, or None where it kept none for this object."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    if "-o" not in args:
        return None
    obj = os.path.join(entry["directory"], args[args.index("-o") + 1])
    report = obj + ".ptxas"
    if not os.path.isfile(obj) or not os.path.isfile(report) or os.path.getmtime(report) < os.path.getmtime(obj):
        return None
    with open(report) as f:
        return f.read().splitlines()


def ptxas_report(entry, scratch):
    """ptxas's -v lines for one translation unit, compiled with the build's flags."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    obj = os.path.join(scratch, os.path.basename(entry["file"]) + ".o")  # never over the build's own
    if "-o" in args:
        args[args.index("-o") + 1] = obj
    else:
        args += ["-o", obj]
    result = subprocess.run(args + ["-Xptxas", "-v"], cwd=entry["directory"], capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"compiling {entry['file']} failed:\n{result.stderr[-4000:]}")
    return result.stderr.splitlines()


def demangle(names):
    """C++ names (c++filt, from binutils), or the mangled ones where it is missing or fails."""
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    except OSError:
        out = []
    if len(out) != len(names):
        return names
    return [re.sub(r"gputrain::kernels::(\(anonymous namespace\)::)?", "", n) for n in out]


def parse(lines, source):
    """One row per (kernel, architecture): registers, spill bytes, shared memory."""
    rows, current = [], None
    for line in lines:
        if m := ENTRY.search(line):
            current = {"file": os.path.basename(source), "mangled": m.group(1), "arch": m.group(2),
                       "spill_stores": 0, "spill_loads": 0}
        elif current and (m := SPILL.search(line)):
            current["spill_stores"], current["spill_loads"] = int(m.group(1)), int(m.group(2))
        elif current and (m := USAGE.search(line)):
            current["registers"], current["smem"] = int(m.group(1)), int(m.group(2) or 0)
            rows.append(current)
            current = None
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build", help="the CMake build directory (default: build)")
    parser.add_argument("--spills-only", action="store_true", help="list only the kernels that spill")
    parser.add_argument("--check", action="store_true", help="exit 1 if a kernel spills (see --allow)")
    parser.add_argument("--compile", action="store_true",
                        help="compile every kernel again instead of reading the build's kept reports")
    parser.add_argument("--allow", nargs=2, action="append", default=[], metavar=("REGEX", "BYTES"),
                        help='with --check: kernels whose "ARCH NAME" matches REGEX may spill up to BYTES')
    opts = parser.parse_args()
    allowances = []
    for regex, limit in opts.allow:
        try:
            allowances.append((re.compile(regex), int(limit)))
        except (re.error, ValueError) as e:
            fail(f"--allow {regex!r} {limit!r}: {e}")

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for entry in kernel_commands(opts.build):
            lines = None if opts.compile else kept_report(entry)
            rows += parse(lines if lines is not None else ptxas_report(entry, scratch), entry["file"])
    if not rows:
        fail("ptxas reported no kernels: was -Xptxas -v ignored by this nvcc?")
    for row, name in zip(rows, demangle([r["mangled"] for r in rows])):
        row["name"] = name

    shown = [r for r in rows if r["spill_stores"] or not opts.spills_only]
    print("| arch | registers | spill stores / loads (bytes) | smem (bytes) | kernel |")
    print("|---|--:|--:|--:|---|")
    for r in sorted(shown, key=lambda r: (r["file"], r["name"], r["arch"])):
        print(f"| {r['arch']} | {r['registers']} | {r['spill_stores']} / {r['spill_loads']} | {r['smem']} | "
              f"`{r['name']}` |")
    spilling = [r for r in rows if r["spill_stores"]]
    print(f"\n{len(rows)} kernels (architecture x instantiation), {len(spilling)} spill")

    if opts.check:
        def allowed(r):
            label = f"{r['arch']} {r['name']}"
            return any(regex.search(label) and r["spill_stores"] <= limit for regex, limit in allowances)
        bad = [r for r in spilling if not allowed(r)]
        for r in bad:
            print(f"SPILLS: {r['arch']} {r['name']}: {r['spill_stores']} bytes stored, {r['registers']} registers",
                  file=sys.stderr)
        if bad:
            print(f"{len(bad)} kernel(s) spill registers: keep fewer values live (32-bit indices, recompute "
                  f"instead of keeping, smaller per-thread tiles), then run this script again", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
