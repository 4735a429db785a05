// The source of catch-sections-and-exception.log and catch-all-passed.log: real Catch v2 (Debian 12's
// catch2) console reports, for tests/scripts/gpu_check_results_test.py. Regenerate with
//   g++ -std=c++17 catch_report_cases.cpp -o /tmp/cases && /tmp/cases --durations yes >
//   catch-sections-and-exception.log /tmp/cases --durations yes "gpu: a passing*" > catch-all-passed.log
// catch-h100-run.log is gpu-tests.log from the 2026-11-25 H100 run (docs/benchmarks.md), as it came back.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <stdexcept>
TEST_CASE("gpu: a passing case that warns") {
  WARN("a note from a passing case");
  CHECK(1 == 1);
}
TEST_CASE("gpu: a case whose second section fails, with a name long enough to wrap over two lines of the report") {
  SECTION("first") { CHECK(1 == 1); }
  SECTION("second") {
    CHECK(1 == 2);
    CHECK(2 == 3);
  }
}
TEST_CASE("gpu: a case that throws") {
  throw std::runtime_error("CUDA error: out of memory (FAILED: inside a message)");
}
TEST_CASE("gpu: a passing case whose message mentions FAILED: in passing") {
  WARN("the word FAILED: in a note is not a failure");
}
TEST_CASE("gpu: a case that passes quietly") { CHECK(true); }
