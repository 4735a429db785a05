// `gputrain eval`: a trained model's loss, perplexity and bits per byte over a whole dataset (every
// window once), in one process or several (each reads a share; the sums meet), as JSON.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "config/settings.h"
#include "data/tokenizer.h"

namespace gputrain {

struct EvalCommandOptions {
  std::string where;            // a run's output folder, a checkpoint, or a Hugging Face model folder
  std::string data;             // a text file or token shards (a glob); empty = the run's data.eval
  std::string format = "auto";  // auto (token shards when the path ends in .bin) | text | tokens
  int64_t batch_size = 0;       // 0 = the run's train.per_device_batch_size
  std::string device = "auto";
  QuantBase quantize = QuantBase::kNone;  // --quantize: evaluate with the block Linears in 4 bits
  bool bf16 = false;  // --precision bf16: the products in bf16 under autocast (a 4-bit base dequantized into bf16)
  TokenizerSpec tokenizer;  // for bits per byte; empty name = the model's own (checkpoint/model_tokenizer.h)
  std::string out;          // also write the JSON result here (rank 0); empty = no file
};

// The result, on rank 0 (nullopt on the others), which also appends it to the run folder's
// eval.jsonl when `where` is a run or one of its checkpoints. Throws data or usage Errors naming
// what cannot be read.
std::optional<nlohmann::ordered_json> evaluate_dataset(const EvalCommandOptions& o);

}  // namespace gputrain
