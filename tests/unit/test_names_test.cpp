// ctest discovers each Catch case by name and runs it with that name as the
// filter: '[' or ']' would be read as a tag, ';' splits CMake lists, and a
// leading "--" is taken as an option. Such a name silently stops its case
// (or the ones after it) from running on its own, so none may have them.
#include <catch2/catch.hpp>

#include <string>

TEST_CASE("test names are safe for ctest discovery", "[meta]") {
  const auto& tests = Catch::getRegistryHub().getTestCaseRegistry().getAllTests();
  CHECK(tests.size() > 50);
  for (const auto& t : tests) {
    const std::string& name = t.getTestCaseInfo().name;
    INFO(name);
    CHECK(name.find_first_of("[];") == std::string::npos);
    CHECK(name.rfind("--", 0) != 0);
  }
}
