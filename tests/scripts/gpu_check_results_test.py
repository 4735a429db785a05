"""scripts/gpu_check_results.py reads Catch's console reports as gpu-check.sh's results.json states them.

The fixtures under data/ are real Catch v2 reports: one from the H100 (3 failures among passing cases
that print warnings) and two from data/catch_report_cases.cpp (a failed section under a wrapped name,
an unexpected exception, a note that mentions "FAILED:", a run where everything passed).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "gpu_check_results.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import gpu_check_results as gcr  # noqa: E402


def fixture(name):
    with open(os.path.join(HERE, "data", name)) as f:
        return f.read().splitlines()


class CatchLogTest(unittest.TestCase):
    def test_h100_run_names_its_three_failures_and_not_the_passing_cases_that_warn(self):
        lines = fixture("catch-h100-run.log")
        self.assertEqual(gcr.catch_summary(lines), "test cases:   26,   23 passed, 3 failed")
        self.assertEqual(gcr.failed_cases(lines), [
            "gpu: a run with kernels.cuda_graphs follows the eager run (bf16, accumulation, dropout, eval)",
            "gpu: kernels.cuda_graphs under fp16 loss scaling skips and rescales as the eager run does",
            "gpu: kernels.cuda_graphs under a launcher's world of one trains as a single process",
        ])

    def test_failed_section_and_exception_are_named_once_and_a_note_mentioning_failed_is_not(self):
        lines = fixture("catch-sections-and-exception.log")
        self.assertEqual(gcr.catch_summary(lines), "test cases: 5, 3 passed, 2 failed")
        self.assertEqual(gcr.failed_cases(lines), [
            "gpu: a case whose second section fails, with a name long enough to wrap over two lines of the "
            "report second",
            "gpu: a case that throws",
        ])

    def test_all_passed(self):
        lines = fixture("catch-all-passed.log")
        self.assertEqual(gcr.catch_summary(lines), "All tests passed (1 assertion in 2 test cases)")
        self.assertEqual(gcr.failed_cases(lines), [])

    def test_a_run_cut_short_says_so_and_keeps_the_failures_seen(self):
        lines = fixture("catch-h100-run.log")
        cut = lines[:lines.index("0.000 s: gpu: kernels.cuda_graphs under fp16 loss scaling skips and rescales "
                                 "as the eager run does")]
        self.assertEqual(gcr.catch_summary(cut), gcr.NO_SUMMARY)
        self.assertEqual(len(gcr.failed_cases(cut)), 2)


class ResultsJsonTest(unittest.TestCase):
    def run_script(self, out, qs_dir, tests_rc, qs_rc):
        table = subprocess.run([sys.executable, SCRIPT, out, qs_dir, "prebuilt at abc1234", "0", str(tests_rc),
                                str(qs_rc)], check=True, capture_output=True, text=True).stdout
        with open(os.path.join(out, "results.json")) as f:
            return json.load(f), table

    def test_results_json_and_table(self):
        with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as qs:
            with open(os.path.join(out, "gpu-tests.log"), "w") as f:
                f.write("\n".join(fixture("catch-sections-and-exception.log")) + "\n")
            with open(os.path.join(qs, "summary.json"), "w") as f:
                json.dump({"device": "cuda:0", "tokens_per_s": 1234.5, "eval_loss": 1.18, "steps": 300}, f)
            res, table = self.run_script(out, qs, 3, 0)
            self.assertEqual(res["binaries"], "prebuilt at abc1234")
            self.assertEqual(res["gpu_tests_rc"], 3)
            self.assertEqual(res["gpu_tests"], "test cases: 5, 3 passed, 2 failed")
            self.assertEqual(res["gpu_tests_failed"][1], "gpu: a case that throws")
            self.assertEqual(res["quickstart"], {"device": "cuda:0", "tokens_per_s": 1234.5, "eval_loss": 1.18,
                                                 "entropy_floor": None, "mem_peak_mb": None})
            self.assertIn("| gpu_tests | test cases: 5, 3 passed, 2 failed |", table)

    def test_no_tests_run_and_a_missing_log(self):
        with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as qs:
            res, _ = self.run_script(out, qs, -1, -1)
            self.assertIsNone(res["gpu_tests"])
            self.assertEqual(res["gpu_tests_failed"], [])
            res, _ = self.run_script(out, qs, 124, -1)
            self.assertEqual(res["gpu_tests"], "no gpu-tests.log")


if __name__ == "__main__":
    unittest.main()
