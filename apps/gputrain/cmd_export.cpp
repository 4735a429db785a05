#include <spdlog/spdlog.h>

#include "checkpoint/model_files.h"
#include "commands.h"

namespace gputrain::app {

int cmd_export(const std::string& checkpoint, const std::string& format, const std::string& out, bool overwrite,
               bool merge_lora) {
  (void)format;  // only "hf" exists; CLI11 checks the value
  const ExportResult r = export_hf(checkpoint, out, overwrite, merge_lora);
  spdlog::info("exported step {} of {} as Hugging Face {}{}: {} tensors in {}/model.safetensors, config.json beside it",
               r.step, r.checkpoint.string(), r.architecture, merge_lora ? " with the LoRA adapters merged" : "",
               r.tensors, out);
  spdlog::info("load it with: {}.from_pretrained(\"{}\")", r.architecture, out);
  return 0;
}

}  // namespace gputrain::app
