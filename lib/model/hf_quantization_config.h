// config.json's quantization_config: a bitsandbytes 4-bit folder (transformers' save_pretrained of a
// model loaded with load_in_4bit) sets model.quantize as it is stored where the recipe leaves it out;
// a recipe's other 4-bit type is a problem naming the key, and other quantizations (bitsandbytes'
// 8 bits, GPTQ, AWQ...) are refused with the fix.
#pragma once
#include "model/hf_config_reader.h"

namespace gputrain {

void import_hf_quantization(HfConfigReader& r);

}  // namespace gputrain
