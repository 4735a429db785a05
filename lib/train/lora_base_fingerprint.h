// model.lora.save: adapters: a checkpoint of the adapters alone records its frozen base's fingerprint
// (model/lora.h: CRC-32C of the base weights' names and float32 bytes, in order), so that it resumes
// on that base only. Taken here without any rank holding the base whole: each rank checksums a
// contiguous share of every base tensor's rows, filled a piece at a time from where the base comes
// from (the seed, model.init_from's files or a checkpoint's: parallel/initial_parts.h), and the
// shares' checksums join in order (util/crc32c.h): the fingerprint of the whole, for any world size.
// A 4-bit base (model.quantize) adds its quantization to the fingerprint.
#pragma once
#include <string>

#include "model/gpt.h"
#include "parallel/communicator.h"
#include "parallel/initial_parts.h"

namespace gputrain {

// `model`: the LoRA model built on the meta device (names, shapes and dtypes); `parts`: its initial
// parts before any rank kept its own; `world`: every rank of the run (null: one process). Every rank calls it.
std::string lora_base_fingerprint_by_parts(const Gpt& model, const InitialParts& parts, Communicator* world);

}  // namespace gputrain
