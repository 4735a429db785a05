"""Prints the slowest tests of a build's last ctest run, from CTest's own timings.

usage: python3 scripts/slowest_tests.py [BUILD_DIR] [N]
  BUILD_DIR (default build) holds Testing/Temporary/CTestCostData.txt, where ctest keeps each test's
  wall time (the mean over its runs); prints the N (default 25) slowest with their seconds and their
  share of the sum, for docs/contributing.md's test-time budget.
"""
import os
import sys


def read_costs(path):
    costs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line == "---":  # the names of the tests that failed follow
                break
            name, _runs, cost = line.rsplit(" ", 2)  # names hold spaces; the last two fields are numbers
            costs.append((float(cost), name))
    return costs


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    path = os.path.join(build, "Testing", "Temporary", "CTestCostData.txt")
    if not os.path.exists(path):
        sys.exit(f"slowest_tests: {path} does not exist\n    fix: run ctest in {build} first")
    costs = sorted(read_costs(path), reverse=True)
    total = sum(c for c, _ in costs)
    print(f"The {min(count, len(costs))} slowest of {len(costs)} tests (ctest's wall seconds; all together {total:.0f} s):")
    for cost, name in costs[:count]:
        print(f"{cost:8.1f} s {100 * cost / max(total, 1e-9):5.1f}%  {name}")


if __name__ == "__main__":
    main()
