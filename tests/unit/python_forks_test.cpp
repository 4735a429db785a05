// The tests' Python references run as forks of a server that imported torch and transformers once
// (tests/reference/fork_server.py): a call sees its caller's working directory, environment and
// arguments and gives its exit status and output as a plain `python` run would; under ctest the server
// is the one the whole run shares (the fixture python_forks).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;

TEST_CASE("python references: a call runs with the caller's directory, environment and arguments", "[meta]") {
  TempDir dir;
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  ScopedEnv value("GPUTRAIN_FORK_TEST_VALUE", "seen");
  // The call's grandparent: this process where the server is this process's own child, another process
  // (the ctest run's server) where it is shared.
  const CommandResult r =
      run_python({"-c",
                  "import os, sys\n"
                  "grand = open(f'/proc/{os.getppid()}/stat').read().split(') ')[1].split()[1]\n"
                  "print(os.getcwd(), os.environ['GPUTRAIN_FORK_TEST_VALUE'], sys.argv[1:], 'grandparent', grand)\n"
                  "import torch, transformers\n"
                  "sys.exit(3)",
                  "one", "two"});
  std::filesystem::current_path(before);
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.output, Contains(dir.path().string() + " seen ['one', 'two'] grandparent "));
  const bool shared = std::getenv("GPUTRAIN_PYTHON_FORKS") != nullptr;
  CHECK((r.output.find("grandparent " + std::to_string(getpid()) + "\n") == std::string::npos) == shared);
  // A script that fails prints its traceback, exit status 1.
  const CommandResult failed = run_python({"-c", "raise ValueError('no such thing')"});
  CHECK(failed.exit_code == 1);
  CHECK_THAT(failed.output, Contains("ValueError: no such thing"));
}
