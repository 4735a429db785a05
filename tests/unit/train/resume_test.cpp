// Resume policy (train/resume.h, from the schema's ResumePolicy of each key):
// one key of every kind, changed alone against a checkpoint's settings.
#include <catch2/catch.hpp>

#include "config/schema.h"
#include "train/resume.h"
#include "util/error.h"

using namespace gputrain;
using json = nlohmann::ordered_json;
using Catch::Matchers::Contains;

namespace {

// How a resume takes `key` set to `value` (a dotted path into settings_to_json).
std::string verdict(const std::string& key, const json& value, Settings base = Settings{}) {
  const json saved = settings_to_json(base);
  json now = saved;
  json* at = &now;
  std::string rest = key;
  for (size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1))
    at = &(*at)[rest.substr(0, dot)];
  (*at)[rest] = value;
  try {
    const ResumeChanges c = compare_for_resume(saved, now, "ckpt");
    if (c.reported.size() == 1 && c.diverging.empty()) return "reported";
    if (c.diverging.size() == 1 && c.reported.empty()) return "diverging";
    return "unexpected";
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kConfig);
    CHECK_THAT(std::string(e.what()), Contains(key + ": "));
    return "refused";
  }
}

}  // namespace

TEST_CASE("resume: each key's schema policy decides what a changed recipe does", "[train][resume]") {
  CHECK(verdict("model.n_layer", 7) == "refused");
  CHECK(verdict("model.lora.targets", json::array({"mlp_up"})) == "refused");
  CHECK(verdict("data.train.span", json::array({0.0, 0.5})) == "refused");
  CHECK(verdict("data.train.synthetic.seed", 99) == "refused");
  CHECK(verdict("run.seed", 99) == "refused");
  CHECK(verdict("optim.name", "lion") == "refused");
  CHECK(verdict("optim.adamw8bit.min_8bit_size", 1) == "refused");
  CHECK(verdict("optim.adafactor.beta1", 0.9) == "refused");
  CHECK(verdict("parallel.tp", 2) == "reported");  // the state is resharded (checkpoint/tensor_parallel_state.h)
  CHECK(verdict("model.dropout", 0.2) == "diverging");
  CHECK(verdict("model.moe.capacity_factor", 2.0) == "diverging");
  CHECK(verdict("data.train.path", json::array({"elsewhere.bin"})) == "diverging");  // a moved file still resumes
  CHECK(verdict("optim.lr", 1e-2) == "diverging");
  CHECK(verdict("train.max_grad_norm", 0.5) == "diverging");
  CHECK(verdict("train.max_steps", 99) == "reported");
  CHECK(verdict("optim.schedule.decay_steps", 99) == "reported");
  CHECK(verdict("data.eval.span", json::array({0.5, 1.0})) == "reported");
  CHECK(verdict("checkpoint.every", 9) == "reported");
  CHECK(verdict("metrics.profile_at", 9) == "reported");
  CHECK(verdict("kernels.cuda_graphs", true) == "reported");
  CHECK(verdict("model.init_from", "x") == "reported");
  CHECK(verdict("parallel.zero", 2) == "reported");
  CHECK(verdict("parallel.pp", 2) == "reported");
  CHECK(verdict("parallel.offload_optimizer", "nvme") == "reported");
  // A key that was a boolean and became an enum (parallel.offload_optimizer): an older checkpoint's
  // false is the word false, not a change.
  const json now_words = settings_to_json(Settings{});
  json saved_bool = now_words;
  REQUIRE(now_words["parallel"]["offload_optimizer"] == "false");
  saved_bool["parallel"]["offload_optimizer"] = false;
  const ResumeChanges unchanged = compare_for_resume(saved_bool, now_words, "ckpt");
  CHECK(unchanged.reported.empty());
  CHECK(unchanged.diverging.empty());
  // A key newer than the checkpoint (train.objective) reads as its default; set otherwise, it changed.
  json older = now_words;
  older["train"].erase("objective");
  CHECK(compare_for_resume(older, now_words, "ckpt").diverging.empty());
  json other = now_words;
  other["train"]["objective"] = "other";
  CHECK(compare_for_resume(older, other, "ckpt").diverging.size() == 1);
  // precision.mode: the saved weights' dtype only changes to or from bf16-pure.
  CHECK(verdict("precision.mode", "bf16") == "diverging");
  CHECK(verdict("precision.mode", "bf16-pure") == "refused");
  // A batch split: reported while the global batch stays the same, else it diverges.
  CHECK(verdict("train.grad_accum_steps", 3) == "diverging");
  Settings split;
  split.train.grad_accum_steps = 2;
  const json saved = settings_to_json(split);
  json now = saved;
  now["train"]["grad_accum_steps"] = 1;
  now["parallel"]["dp"] = 2;
  const ResumeChanges c = compare_for_resume(saved, now, "ckpt");
  CHECK(c.diverging.empty());
  CHECK(c.reported.size() == 2);
}

TEST_CASE("resume: a new model, checkpoint, metrics, kernels or data.eval key cannot fall into diverging unsaid",
          "[train][resume]") {
  // A key without a policy diverges (the default); docs/checkpoints.md "Changing the recipe on resume" says which
  // groups are refused or reported, with these exceptions.
  for (const FieldSpec& f : schema()) {
    INFO(f.path);
    const bool shape =
        (f.path.rfind("model.", 0) == 0 && f.path != "model.dropout" && f.path != "model.attention" &&
         f.path != "model.init_from" && f.path.rfind("model.lora.dropout", 0) != 0 && f.path != "model.lora.save" &&
         f.path.rfind("model.moe.capacity", 0) != 0 && f.path != "model.moe.aux_loss_coef" &&
         f.path != "model.moe.balance" && f.path != "model.moe.bias_rate");
    if (shape) CHECK(f.on_resume == ResumePolicy::kRefused);
    for (const char* reported : {"checkpoint.", "metrics.", "kernels.", "data.eval."})
      if (f.path.rfind(reported, 0) == 0) CHECK(f.on_resume == ResumePolicy::kReported);
  }
}
