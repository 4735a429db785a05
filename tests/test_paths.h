// Where the tests find the binary, the sources, the shared data, Python and their cache. Defined in
// one generated file (tests/CMakeLists.txt) rather than as compile definitions: an absolute path on
// every test's command line made each clone's compiles differ, so ccache could not share them.
#pragma once

namespace gputrain::test {
extern const char* const kGputrainBinary;
extern const char* const kSourceDir;
extern const char* const kSharedDataDir;
extern const char* const kPython;
extern const char* const kTestCacheDir;
}  // namespace gputrain::test

#define GPUTRAIN_BINARY (::gputrain::test::kGputrainBinary)
#define GPUTRAIN_SOURCE_DIR (::gputrain::test::kSourceDir)
#define GPUTRAIN_SHARED_DATA_DIR (::gputrain::test::kSharedDataDir)
#define GPUTRAIN_PYTHON (::gputrain::test::kPython)
#define GPUTRAIN_TEST_CACHE_DIR (::gputrain::test::kTestCacheDir)
