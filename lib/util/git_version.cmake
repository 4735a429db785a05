# Run at every build (lib/CMakeLists.txt): writes OUTPUT, a header defining
# GPUTRAIN_GIT as `git describe --always --dirty` of SOURCE_DIR, and rewrites
# it only when that changes, so a commit (or a first edit after one) rebuilds
# version.cpp alone and `gputrain --version` and checkpoints name the sources
# the binary was built from, not those of the last configure.
execute_process(COMMAND git describe --always --dirty WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE git OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT git)
  set(git unknown)
endif()
set(text "// Generated at build time by lib/util/git_version.cmake; do not edit.\n#define GPUTRAIN_GIT \"${git}\"\n")
set(old "")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUTPUT} "${text}")
endif()
