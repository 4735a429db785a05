#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>
#include <iterator>

#include "commands.h"
#include "train/generate.h"

namespace gputrain::app {

void messages_to_stderr() {
  auto log = spdlog::stderr_color_mt("stderr");
  log->set_pattern("[%H:%M:%S] %^%l%$ %v");
  log->flush_on(spdlog::level::info);
  spdlog::set_default_logger(log);
}

int cmd_generate(GenerateOptions o) {
  messages_to_stderr();  // stdout carries the generated text alone
  if (o.prompt == "-") o.prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  generate_text(o, stdout);
  return 0;
}

}  // namespace gputrain::app
