// Model weights in files, read part by part: what a rank keeps of each parameter (its tensor-parallel
// slice, its ZeRO-3 rows; parallel/initial_parts.h asks) is read as the byte ranges holding exactly
// those elements (safetensors are row-major: a run of whole rows is one range), never a whole tensor.
// Sources: model.init_from (a Hugging Face folder or file in model.arch's layout, sharded or not,
// any stored dtype; a gputrain weights file; a gputrain checkpoint) and a checkpoint's model files
// for resume, in any of their layouts (one process, per-rank files with ZeRO-3's row pieces,
// tensor-parallel shards of another tp).
#pragma once
#include <torch/types.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/hf_4bit_tensors.h"
#include "config/settings.h"
#include "model/part_reader.h"
#include "util/named_tensor.h"
#include "util/read_only_file.h"

namespace gputrain {

class HfWeightImport;
struct HfPlacement;

class StoredWeights : public PartReader {
 public:
  // `params`: the parameters to fill (a LoRA model's base only), for their names and whole shapes (a
  // model on the meta device will do). Only the files' headers are read here, and checked against
  // those shapes and names: DataErrors name the file, the tensor and the recipe key to change.
  static std::unique_ptr<StoredWeights> init_from(const std::string& path, const ModelSettings& m,
                                                  const std::vector<NamedTensor>& params);
  // A checkpoint's model files (resume): every one of `params` must be there, no other name.
  static std::unique_ptr<StoredWeights> checkpoint(const std::filesystem::path& dir,
                                                   const std::vector<NamedTensor>& params, const std::string& source,
                                                   const std::string& fix);

  Coverage covers(const std::string& name) const override;
  void read(torch::Tensor& out, const std::string& name, const WholeIndex& at) const override;
  std::optional<Quantized4bit> stored_4bit(const std::string& name, int64_t first, int64_t count) const override;

  // Each of `params` it covers, read whole (a model built whole: generate, eval, a LoRA run's base).
  void read_whole(const std::vector<NamedTensor>& params) const;

  const std::string& description() const { return description_; }  // for the log
  uint64_t bytes_read() const { return bytes_read_; }              // tensor data read so far
  uint64_t bytes_stored() const { return bytes_stored_; }          // of the tensors it takes from

 private:
  // A stored tensor seen as [a, b] (more dimensions: [its first, the rest]): stored index -> whole
  // index along the parameter's rows (a) and columns (b), or the other way round when transposed.
  struct Piece {
    int file = -1;         // index into files_; -1: `memory` holds it
    torch::Tensor memory;  // [a, b] on the host
    torch::ScalarType dtype = torch::kFloat;
    uint64_t offset = 0;
    int64_t a = 0, b = 0;
    torch::Tensor a_whole, b_whole;  // int64; -1 = not one of ours
    bool transposed = false;
    int quantized = -1;  // index into quantized_: a bitsandbytes 4-bit tensor, dequantized as read
  };
  struct Parameter {
    std::vector<int64_t> shape;  // whole
    std::vector<Piece> pieces;
    int64_t covered = 0;  // elements the pieces give
  };
  explicit StoredWeights(const std::vector<NamedTensor>& params);
  // Whether `name` is one of ours of shape `whole`; else it is listed as foreign or of the wrong shape.
  bool fits(const std::string& name, at::IntArrayRef whole, std::vector<std::string>& wrong,
            std::vector<std::string>& foreign) const;
  // DataError (load_module_weights' words) for a wrong shape, a parameter not wholly given, a foreign name.
  void check_complete(const std::string& source, const std::string& fix, const std::vector<std::string>& wrong,
                      const std::vector<std::string>& foreign) const;
  // A Hugging Face tensor of `shape` at `offset` of file `file`, where `place` puts it in ours.
  static Piece placed_piece(const HfPlacement& place, int file, torch::ScalarType dtype, uint64_t offset,
                            at::IntArrayRef shape);
  int add_file(const std::string& path);
  void add_piece(const std::string& name, Piece piece, uint64_t bytes);
  void read_piece(const Piece& piece, torch::Tensor& out2, const WholeIndex& at, const Parameter& p) const;
  void read_block(const Piece& piece, const torch::Tensor& a_rows, const torch::Tensor& b_cols,
                  torch::Tensor& buffer) const;

  // A Hugging Face folder's 4-bit tensors (taken out of `hf_files`' headers), placed by `import`, each
  // checked against model.quantize.
  void add_4bit_tensors(std::vector<HfWeightFile>& hf_files, HfWeightImport& import, const ModelSettings& m);

  std::vector<std::unique_ptr<ReadOnlyFile>> files_;
  std::vector<Stored4bitTensor> quantized_;
  std::map<std::string, Parameter> params_;
  std::string description_;
  mutable std::atomic<uint64_t> bytes_read_{0};
  uint64_t bytes_stored_ = 0;
};

}  // namespace gputrain
