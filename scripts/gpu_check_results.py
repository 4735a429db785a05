#!/usr/bin/env python3
"""The closing step of scripts/gpu-check.sh: results.json and a Markdown table.

results.json says, without opening any log, what a GPU-host call showed: the exit codes of the build,
the gpu tests and the quickstart, Catch's summary line, the names of the failed gpu tests and the
quickstart's summary. A device call returns only a few files, so this is the one to read first.

Usage: gpu_check_results.py OUT QUICKSTART_DIR BINARIES BUILD_RC TESTS_RC QUICKSTART_RC
(TESTS_RC -1: no tests were run; QUICKSTART_RC -1: no quickstart was run).
"""
import json
import os
import sys

NO_SUMMARY = "no summary line (the run was cut short?)"


def catch_summary(lines):
    """Catch's closing line: "All tests passed (...)" or "test cases: N | P passed | F failed"."""
    return next((l.strip().replace(" | ", ", ") for l in reversed(lines)
                 if l.startswith(("All tests passed", "test cases:"))), NO_SUMMARY)


def _is_rule(line):
    return len(line) > 40 and set(line) == {"-"}


def _is_failure(line):
    # "path:line: FAILED:" (Catch may wrap it before "FAILED:"). Messages quoted under it are indented,
    # so a note that merely mentions the word is not taken for a failure.
    return not line[:1].isspace() and line.rstrip().endswith("FAILED:")


def failed_cases(lines):
    """Names of the failed test cases, in order, each once.

    Catch's console reporter opens each case's report (a failure, or the warnings of a passing case)
    with the case's name, and its sections' names, wrapped over lines between two dashed rules. The
    report is a failure when a line ending in "FAILED:" (an assertion, an unexpected exception or a
    fatal signal) comes before the next report's opening rule. A failure inside a section is named by
    the case and its section path.
    """
    rules = [i for i, l in enumerate(lines) if _is_rule(l)]
    failed = []
    for a, b in zip(rules[::2], rules[1::2]):
        name = " ".join(l.strip() for l in lines[a + 1:b])
        end = next((i for i in rules if i > b), len(lines))
        if any(_is_failure(l) for l in lines[b:end]) and name not in failed:
            failed.append(name)
    return failed


def results(out, qs_dir, binaries, build_rc, tests_rc, qs_rc):
    summary = {}
    p = os.path.join(qs_dir, "summary.json")
    if os.path.exists(p):
        with open(p) as f:
            summary = json.load(f)
    tests_summary, failed = None, []
    log = os.path.join(out, "gpu-tests.log")
    if tests_rc >= 0:
        if os.path.exists(log):
            with open(log, errors="replace") as f:
                lines = f.read().splitlines()
            tests_summary, failed = catch_summary(lines), failed_cases(lines)
        else:
            tests_summary = "no gpu-tests.log"
    return {"binaries": binaries, "build_rc": build_rc, "gpu_tests_rc": tests_rc, "gpu_tests": tests_summary,
            "gpu_tests_failed": failed, "quickstart_rc": qs_rc,
            "quickstart": {k: summary.get(k)
                           for k in ("device", "tokens_per_s", "eval_loss", "entropy_floor", "mem_peak_mb")}}


def main(argv):
    if len(argv) != 7:
        sys.exit(__doc__)
    out, qs_dir, binaries = argv[1:4]
    res = results(out, qs_dir, binaries, *map(int, argv[4:7]))
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=2)
    print("| check | result |\n|---|---|")
    for k, v in res.items():
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main(sys.argv)
