#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "train/evaluate_dataset.h"
#include "util/text_file.h"

namespace gputrain::app {

int cmd_eval(const EvalCommandOptions& o, const LaunchArgs& l) {
  messages_to_stderr();  // stdout carries the JSON alone
  if (l.launching()) {
    // Each worker runs `eval` with the same arguments and the torchrun variables; their messages
    // go to stderr, and rank 0's result comes back through a file.
    LaunchOptions lo = launch_options(l);
    const std::string out =
        o.out.empty()
            ? (std::filesystem::temp_directory_path() / ("gputrain-eval-" + std::to_string(getpid()) + ".json"))
                  .string()
            : o.out;
    lo.relay_fd = STDERR_FILENO;
    lo.worker_args = {"eval",     o.where,  "--format",     o.format,
                      "--device", o.device, "--batch-size", std::to_string(o.batch_size),
                      "--out",    out};
    if (!o.data.empty()) lo.worker_args.insert(lo.worker_args.end(), {"--data", o.data});
    if (!o.tokenizer.name.empty()) lo.worker_args.insert(lo.worker_args.end(), {"--tokenizer", o.tokenizer.name});
    if (!o.tokenizer.vocab_path.empty())
      lo.worker_args.insert(lo.worker_args.end(), {"--vocab", o.tokenizer.vocab_path});
    if (!o.tokenizer.merges_path.empty())
      lo.worker_args.insert(lo.worker_args.end(), {"--merges", o.tokenizer.merges_path});
    const int code = launch_workers(lo);
    if (code == 0) std::printf("%s", read_text_file(out, "evaluation result").c_str());
    if (o.out.empty()) std::filesystem::remove(out);
    return code;
  }
  if (const auto result = evaluate_dataset(o)) std::printf("%s\n", result->dump(2).c_str());
  return 0;
}

}  // namespace gputrain::app
