#include <spdlog/spdlog.h>

#include "checkpoint/model_files.h"
#include "commands.h"

namespace gputrain::app {

int cmd_export(const std::string& checkpoint, const std::string& format, const std::string& out, bool overwrite) {
  (void)format;  // only "hf" exists; CLI11 checks the value
  const ExportResult r = export_hf_gpt2(checkpoint, out, overwrite);
  spdlog::info("exported step {} of {} as Hugging Face GPT2LMHeadModel: {} tensors in {}/model.safetensors, "
               "config.json beside it", r.step, r.checkpoint.string(), r.tensors, out);
  spdlog::info("load it with: GPT2LMHeadModel.from_pretrained(\"{}\")", out);
  return 0;
}

}  // namespace gputrain::app
