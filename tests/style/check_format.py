#!/usr/bin/env python3
"""Fails when a C++ or CUDA source in the repository is not as .clang-format formats it.

Usage: check_format.py <clang-format> <repository root>. Lists the tracked sources (third_party/ and
the CMake templates *.in excepted) and runs clang-format --dry-run -Werror over them; the output
names each file and line that differs. Fix: clang-format -i <file> (docs/contributing.md).
"""
import shutil
import subprocess
import sys


def main() -> int:
    clang_format, root = sys.argv[1], sys.argv[2]
    if not shutil.which(clang_format):
        print(f"check_format: clang-format was not found ({clang_format})\n    fix: bash scripts/setup.sh installs it")
        return 1
    files = subprocess.run(["git", "-C", root, "ls-files", "*.cpp", "*.h", "*.cu", "*.cuh"],
                           check=True, capture_output=True, text=True).stdout.split()
    files = [f for f in files if not f.startswith("third_party/")]
    if not files:
        print("check_format: no sources listed by git in " + root)
        return 1
    bad = []
    for i in range(0, len(files), 50):
        r = subprocess.run([clang_format, "--style=file", "--dry-run", "-Werror", *files[i:i + 50]], cwd=root,
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.stdout.write(r.stderr[:20000])
            bad += sorted({line.split(":")[0] for line in r.stderr.splitlines() if ": error:" in line})
    if bad:
        print(f"\n{len(bad)} file(s) not formatted: {' '.join(bad)}\n    fix: {clang_format} -i <file>")
        return 1
    print(f"check_format: {len(files)} files formatted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
