#include "checkpoint/stored_weights.h"

#include <ATen/ATen.h>

#include <array>
#include <set>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/model_files.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/training_checkpoint.h"
#include "config/recipe.h"
#include "model/architecture.h"
#include "model/hf_config_reader.h"
#include "model/hf_mapping.h"
#include "model/lora.h"
#include "model/quantized_weight.h"
#include "parallel/tensor_shard.h"
#include "util/error.h"
#include "util/tensor_text.h"
#include "util/text_file.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;

// A block read at once: about 8 MiB of the stored dtype.
constexpr int64_t kBlockBytes = int64_t{8} << 20;

// [first, the rest] of a shape (a 1-D one a column of rows, as model/initial_values.h's WholeIndex).
std::pair<int64_t, int64_t> as_matrix(at::IntArrayRef shape) {
  const int64_t a = shape.empty() ? 1 : shape[0];
  return {a, a > 0 && !shape.empty() ? c10::multiply_integers(shape) / a : 1};
}

// Of `want` (whole indices; < 0 = padding), those a stored axis mapping stored -> whole (`stored_to_whole`)
// holds: their positions in `want` and their stored indices, in stored order.
std::pair<at::Tensor, at::Tensor> held_positions(const at::Tensor& want, const at::Tensor& stored_to_whole,
                                                 int64_t whole_n) {
  at::Tensor inverse = at::full({whole_n}, -1, at::kLong);
  const at::Tensor valid = (stored_to_whole >= 0) & (stored_to_whole < whole_n);
  inverse.index_put_({stored_to_whole.masked_select(valid)},
                     at::arange(stored_to_whole.numel(), at::kLong).masked_select(valid));
  const at::Tensor in_range = (want >= 0) & (want < whole_n);
  const at::Tensor stored =
      at::where(in_range, inverse.index_select(0, want.clamp(0, std::max<int64_t>(whole_n - 1, 0))), -1);
  const at::Tensor positions = at::nonzero(stored >= 0).flatten();
  auto [sorted, order] = stored.index_select(0, positions).sort();
  return {positions.index_select(0, order), sorted};
}

int64_t valid_count(const at::Tensor& stored_to_whole, int64_t whole_n) {
  return ((stored_to_whole >= 0) & (stored_to_whole < whole_n)).sum().item<int64_t>();
}

std::map<std::string, std::vector<int64_t>> shapes_of(const std::vector<NamedTensor>& params) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& p : params) out[p.name] = p.tensor.sizes().vec();
  return out;
}

bool written_by_gputrain(const SafetensorsHeader& h) {
  const auto it = h.metadata.find("format");
  return it != h.metadata.end() && it->second == "gputrain";
}

}  // namespace

StoredWeights::Piece StoredWeights::placed_piece(const HfPlacement& place, int file, torch::ScalarType dtype,
                                                 uint64_t offset, at::IntArrayRef shape) {
  const auto [a, b] = as_matrix(shape);
  // Stored (i, j) is ours (row_offset + i, j), or transposed (row_offset + j, i); rows past `rows` are not ours.
  const int64_t ours_rows = place.transposed ? b : a;
  at::Tensor row_map = at::arange(place.row_offset, place.row_offset + ours_rows, at::kLong);
  row_map.masked_fill_(at::arange(ours_rows, at::kLong) >= place.rows, -1);
  const at::Tensor other = at::arange(place.transposed ? a : b, at::kLong);
  return Piece{file,
               {},
               dtype,
               offset,
               a,
               b,
               place.transposed ? other : row_map,
               place.transposed ? row_map : other,
               place.transposed};
}

int StoredWeights::add_file(const std::string& path) {
  files_.push_back(std::make_unique<ReadOnlyFile>(path));
  return static_cast<int>(files_.size()) - 1;
}

void StoredWeights::add_piece(const std::string& name, Piece piece, uint64_t bytes) {
  Parameter& p = params_.at(name);
  const auto [rows, cols] = as_matrix(p.shape);
  p.covered += piece.transposed ? valid_count(piece.a_whole, cols) * valid_count(piece.b_whole, rows)
                                : valid_count(piece.a_whole, rows) * valid_count(piece.b_whole, cols);
  p.pieces.push_back(std::move(piece));
  bytes_stored_ += bytes;
}

PartReader::Coverage StoredWeights::covers(const std::string& name) const {
  const auto it = params_.find(name);
  if (it == params_.end() || it->second.covered == 0) return Coverage::kNone;
  const auto [rows, cols] = as_matrix(it->second.shape);
  return it->second.covered >= rows * cols ? Coverage::kAll : Coverage::kPart;
}

void StoredWeights::read(torch::Tensor& out, const std::string& name, const WholeIndex& at) const {
  torch::NoGradGuard no_grad;
  const Parameter& p = params_.at(name);
  const at::Tensor rows = at.rows.to(at::kLong).cpu(), cols = at.cols.to(at::kLong).cpu();
  if (out.numel() != rows.numel() * cols.numel() || !out.is_contiguous())
    throw std::logic_error("StoredWeights::read: '" + name + "' is not a contiguous " + std::to_string(rows.numel()) +
                           " x " + std::to_string(cols.numel()) + " part");
  at::Tensor out2 = out.view({rows.numel(), cols.numel()});
  const at::Tensor padding = at::nonzero(rows < 0).flatten();
  if (padding.numel() > 0) out2.index_fill_(0, padding.to(out.device()), 0);
  for (const Piece& piece : p.pieces) read_piece(piece, out2, {rows, cols, at.whole_cols}, p);
}

// The elements of `at` that `piece` holds, read a block of stored rows at a time and put in place.
void StoredWeights::read_piece(const Piece& piece, torch::Tensor& out2, const WholeIndex& at,
                               const Parameter& p) const {
  const auto [whole_rows, whole_cols] = as_matrix(p.shape);
  // Positions in `out2` and stored indices of its rows and columns that the piece holds.
  auto [row_pos, row_st] = held_positions(at.rows, piece.transposed ? piece.b_whole : piece.a_whole, whole_rows);
  auto [col_pos, col_st] = held_positions(at.cols, piece.transposed ? piece.a_whole : piece.b_whole, whole_cols);
  if (row_pos.numel() == 0 || col_pos.numel() == 0) return;
  const at::Tensor& a_pos = piece.transposed ? col_pos : row_pos;
  const at::Tensor& a_st = piece.transposed ? col_st : row_st;
  const at::Tensor& b_pos = piece.transposed ? row_pos : col_pos;
  const at::Tensor& b_st = piece.transposed ? row_st : col_st;
  const int64_t nb = b_st.numel();
  const int64_t block = std::max<int64_t>(1, kBlockBytes / (nb * static_cast<int64_t>(c10::elementSize(piece.dtype))));
  const at::Tensor b_index = b_pos.to(out2.device());
  for (int64_t first = 0; first < a_st.numel(); first += block) {
    const int64_t n = std::min(block, a_st.numel() - first);
    at::Tensor buffer;
    read_block(piece, a_st.narrow(0, first, n), b_st, buffer);
    at::Tensor values = buffer.to(out2.device(), out2.scalar_type());
    const at::Tensor a_index = a_pos.narrow(0, first, n).to(out2.device());
    if (piece.transposed) out2.index_put_({b_index.unsqueeze(1), a_index.unsqueeze(0)}, values.t());
    else out2.index_put_({a_index.unsqueeze(1), b_index.unsqueeze(0)}, values);
  }
}

// Stored rows `a_rows` x columns `b_cols` (both ascending) of `piece` into `buffer`, in its stored
// dtype: from a file, one read per run of bytes that lie next to each other there.
void StoredWeights::read_block(const Piece& piece, const at::Tensor& a_rows, const at::Tensor& b_cols,
                               at::Tensor& buffer) const {
  if (piece.file < 0) {
    buffer = piece.memory.index_select(0, a_rows).index_select(1, b_cols);
    return;
  }
  if (piece.quantized >= 0) {  // the blocks of the rows from the first to the last, dequantized
    const Stored4bitTensor& t = quantized_[static_cast<size_t>(piece.quantized)];
    const int64_t lo = a_rows[0].item<int64_t>(), hi = a_rows[-1].item<int64_t>();
    buffer = read_4bit_rows(t, files_, lo, hi - lo + 1).index_select(0, a_rows - lo).index_select(1, b_cols);
    bytes_read_ += static_cast<uint64_t>((hi - lo + 1) * piece.b / 2);
    return;
  }
  const int64_t na = a_rows.numel(), nb = b_cols.numel();
  buffer = at::empty({na, nb}, at::TensorOptions().dtype(piece.dtype));
  const auto es = static_cast<uint64_t>(c10::elementSize(piece.dtype));
  const int64_t* a = a_rows.data_ptr<int64_t>();
  const int64_t* b = b_cols.data_ptr<int64_t>();
  // Runs of consecutive stored columns: [first column, length, place in the buffer's row].
  std::vector<std::array<int64_t, 3>> runs;
  for (int64_t j = 0; j < nb; ++j) {
    if (!runs.empty() && runs.back()[0] + runs.back()[1] == b[j]) ++runs.back()[1];
    else runs.push_back({b[j], 1, j});
  }
  const ReadOnlyFile& file = *files_[static_cast<size_t>(piece.file)];
  char* dst = static_cast<char*>(buffer.data_ptr());
  uint64_t pending_at = 0, pending_len = 0;
  char* pending_to = nullptr;
  auto flush = [&] {
    if (pending_len > 0) file.read(pending_to, pending_len, pending_at);
    bytes_read_ += pending_len;
    pending_len = 0;
  };
  for (int64_t i = 0; i < na; ++i)
    for (const auto& [col, len, place] : runs) {
      const uint64_t at = piece.offset + static_cast<uint64_t>(a[i] * piece.b + col) * es;
      char* to = dst + static_cast<uint64_t>(i * nb + place) * es;
      const uint64_t bytes = static_cast<uint64_t>(len) * es;
      if (pending_len > 0 && pending_at + pending_len == at && pending_to + pending_len == to) {
        pending_len += bytes;
        continue;
      }
      flush();
      pending_at = at, pending_to = to, pending_len = bytes;
    }
  flush();
}

std::optional<Quantized4bit> StoredWeights::stored_4bit(const std::string& name, int64_t first, int64_t count) const {
  const auto it = params_.find(name);
  if (it == params_.end()) return std::nullopt;
  const int64_t cols = as_matrix(it->second.shape).second;
  for (const Piece& piece : it->second.pieces) {
    if (piece.quantized < 0 || piece.transposed || piece.a != count || piece.b != cols) continue;
    if (!at::equal(piece.a_whole, at::arange(first, first + count, at::kLong))) continue;
    const Stored4bitTensor& t = quantized_[static_cast<size_t>(piece.quantized)];
    bytes_read_ += stored_4bit_bytes(t);
    return read_4bit(t, files_);
  }
  return std::nullopt;
}

void StoredWeights::add_4bit_tensors(std::vector<HfWeightFile>& hf_files, HfWeightImport& import,
                                     const ModelSettings& m) {
  for (Stored4bitTensor& t : take_4bit_tensors(hf_files, files_)) {
    const std::string& file = hf_files[static_cast<size_t>(t.codes.file)].path;
    const Quantized4bit& q = t.layout;
    const QuantizeSettings& want = m.quantize;
    if (want.enabled() &&
        (q.type != quant4_type(want.base) || q.block_size != want.block_size || q.nested != want.double_quant))
      throw data_error(
          "model.init_from: '" + file + "' holds " + t.name + " in 4 bits as " + quant4_type_name(q.type) +
          ", block size " + std::to_string(q.block_size) +
          (q.nested ? ", double quantization" : ", no double quantization") +
          ", not as model.quantize says\n    fix: set model.quantize to {base: " + quant4_type_name(q.type) +
          ", block_size: " + std::to_string(q.block_size) + ", double_quant: " + (q.nested ? "true" : "false") +
          "} (or base: none, to train on its values dequantized)");
    bool must_be_zero = false;
    const std::optional<HfPlacement> place = import.place(t.name, q.shape, file, must_be_zero);
    if (!place) {
      if (must_be_zero) import.check_zero(t.name, read_4bit_rows(t, files_, 0, q.shape.empty() ? 1 : q.shape[0]), file);
      continue;
    }
    Piece piece = placed_piece(*place, t.codes.file, q.dtype, 0, q.shape);
    piece.quantized = static_cast<int>(quantized_.size());
    const uint64_t bytes = stored_4bit_bytes(t);
    quantized_.push_back(std::move(t));
    add_piece(place->ours, std::move(piece), bytes);
  }
}

void StoredWeights::read_whole(const std::vector<NamedTensor>& params) const {
  for (const auto& p : params) {
    if (covers(p.name) == Coverage::kNone) continue;
    torch::Tensor t = p.tensor;
    read(t, p.name, whole_index(t.sizes()));
  }
}

std::unique_ptr<StoredWeights> StoredWeights::init_from(const std::string& path, const ModelSettings& m,
                                                        const std::vector<NamedTensor>& params) {
  const std::string fix = "start from weights of a model with this recipe's model.* settings";
  const fs::path dir(path);
  if (fs::is_directory(dir) && is_training_checkpoint(dir)) {
    if (auto problem = checkpoint_problem(dir))
      throw data_error("model.init_from: checkpoint '" + path + "' is not usable: " + *problem +
                       "\n    fix: name a complete checkpoint");
    const Settings saved = settings_from_saved_recipe(read_text_file(dir / "recipe.yaml"),
                                                      (dir / "recipe.yaml").string(), architecture_rules());
    const std::string source = "model.init_from checkpoint '" + path + "'";
    std::unique_ptr<StoredWeights> out;
    if (saved.model.lora.rank == 0) {
      out = checkpoint(dir, params, source, fix);
    } else {  // LoRA's adapters merged into the weights they adapt: the merged model, in memory
      out.reset(new StoredWeights(params));
      std::vector<std::string> wrong, foreign;
      for (const auto& w : checkpoint_plain_weights(dir, saved)) {
        const auto [a, b] = as_matrix(w.tensor.sizes());
        if (out->fits(w.name, w.tensor.sizes(), wrong, foreign))
          out->add_piece(w.name,
                         Piece{-1, w.tensor.reshape({a, b}), w.tensor.scalar_type(), 0, a, b, at::arange(a, at::kLong),
                               at::arange(b, at::kLong)},
                         w.tensor.nbytes());
      }
      out->check_complete(source, fix, wrong, foreign);
    }
    out->description_ = "weights of gputrain checkpoint " + path;
    return out;
  }
  std::unique_ptr<StoredWeights> out(new StoredWeights(params));
  const std::string source = "model.init_from '" + path + "'";
  if (!fs::is_directory(dir)) {
    const SafetensorsHeader header = read_safetensors_header(path);
    if (written_by_gputrain(header)) {  // our names, whole tensors
      const int file = out->add_file(path);
      std::vector<std::string> wrong, foreign;
      for (const auto& e : header.entries) {
        const auto [a, b] = as_matrix(e.shape);
        if (out->fits(e.name, e.shape, wrong, foreign))
          out->add_piece(e.name,
                         Piece{file, {}, e.dtype, e.offset, a, b, at::arange(a, at::kLong), at::arange(b, at::kLong)},
                         e.bytes);
      }
      out->check_complete(source, fix, wrong, foreign);
      out->description_ = "gputrain weights from " + path;
      return out;
    }
  }
  // A Hugging Face folder or file, in model.arch's layout.
  const Architecture& arch = architecture(m);
  const auto check_config = [&](const fs::path& folder) {
    // The settings were made from this config.json when the recipe was loaded; a run's saved
    // recipe may meet a folder that changed since.
    ModelSettings copy = m;
    const nlohmann::json config = read_hf_config(folder);  // the reader keeps a reference
    HfConfigReader r(config, (folder / "config.json").string(), copy, [](const std::string&) { return true; });
    import_hf_config(r);
    r.throw_if_problems(source);
  };
  std::vector<HfWeightFile> hf_files;
  if (fs::is_directory(dir)) {
    check_config(dir);
    hf_files = hf_weight_files(dir);
  } else {
    if (fs::exists(dir.parent_path() / "config.json")) check_config(dir.parent_path());
    hf_files.push_back({path, read_safetensors_header(path)});
  }
  HfWeightImport import(m, shapes_of(params), source);
  for (const auto& f : hf_files) out->add_file(f.path);
  out->add_4bit_tensors(hf_files, import, m);
  for (size_t i = 0; i < hf_files.size(); ++i) {
    const HfWeightFile& f = hf_files[i];
    const int file = static_cast<int>(i);
    for (const auto& e : f.header.entries) {
      bool must_be_zero = false;
      const std::optional<HfPlacement> place = import.place(e.name, e.shape, f.path, must_be_zero);
      if (must_be_zero) {  // a bias ours lacks: small, read whole
        at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
        out->files_[static_cast<size_t>(file)]->read(t.data_ptr(), e.bytes, e.offset);
        out->bytes_read_ += e.bytes;
        import.check_zero(e.name, t, f.path);
      }
      if (place) out->add_piece(place->ours, placed_piece(*place, file, e.dtype, e.offset, e.shape), e.bytes);
    }
  }
  import.finish();
  out->description_ = std::string("Hugging Face ") + arch.hf.family + " weights from " + path;
  return out;
}

std::unique_ptr<StoredWeights> StoredWeights::checkpoint(const fs::path& dir, const std::vector<NamedTensor>& params,
                                                         const std::string& source, const std::string& fix) {
  std::unique_ptr<StoredWeights> out(new StoredWeights(params));
  const StoredModel stored = checkpoint_model_files(dir);
  std::map<std::string, const TensorShard*> split;
  for (const auto& s : stored.split)
    if (s.dim >= 0) split[s.name] = &s;
  std::vector<std::string> wrong, foreign;
  std::set<std::string> seen;  // (name, tp rank, first row): a tied embedding two stages wrote is read once
  for (const StoredModelFile& f : stored.files) {
    const int file = out->add_file(f.path);
    for (const auto& e : f.header.entries) {
      const auto rows = f.rows.find(e.name);
      const auto s = split.find(e.name);
      const bool cut = s != split.end() && static_cast<int64_t>(e.shape.size()) > s->second->dim;
      // The whole tensor this piece is part of: ZeRO-3's rows of the tp rank's, the tp ranks' joined.
      std::vector<int64_t> whole = e.shape;
      if (rows != f.rows.end() && !whole.empty()) whole[0] = rows->second.whole_rows;
      if (cut) whole[static_cast<size_t>(s->second->dim)] *= static_cast<int64_t>(stored.tp);
      if (!out->fits(e.name, whole, wrong, foreign)) continue;
      const int64_t first = rows != f.rows.end() ? rows->second.first : 0;
      if (!seen.insert(e.name + "/" + std::to_string(f.tp_rank) + "/" + std::to_string(first)).second) continue;
      WholeIndex index = whole_index(whole);
      if (cut) index = shard_index(index, *s->second, static_cast<int>(f.tp_rank), static_cast<int>(stored.tp));
      const auto [a, b] = as_matrix(e.shape);
      if (first < 0 || first + a > index.rows.numel() || b != index.cols.numel())
        throw data_error("checkpoint '" + dir.string() + "': '" + f.path + "' holds rows of " + e.name +
                         " past its end\n    fix: resume from another checkpoint");
      out->add_piece(e.name, Piece{file, {}, e.dtype, e.offset, a, b, index.rows.narrow(0, first, a), index.cols},
                     e.bytes);
    }
  }
  out->check_complete(source, fix, wrong, foreign);
  out->description_ = "checkpoint " + dir.string();
  return out;
}

StoredWeights::StoredWeights(const std::vector<NamedTensor>& params) {
  for (const auto& p : params) params_[p.name].shape = p.tensor.sizes().vec();
}

bool StoredWeights::fits(const std::string& name, at::IntArrayRef whole, std::vector<std::string>& wrong,
                         std::vector<std::string>& foreign) const {
  const auto it = params_.find(name);
  if (it == params_.end()) {
    foreign.push_back(name);
    return false;
  }
  if (whole == at::IntArrayRef(it->second.shape)) return true;
  wrong.push_back(name + " is " + shape_str(whole) + " there but " + shape_str(it->second.shape) + " in this model");
  return false;
}

void StoredWeights::check_complete(const std::string& source, const std::string& fix,
                                   const std::vector<std::string>& wrong,
                                   const std::vector<std::string>& foreign) const {
  std::vector<std::string> missing;
  for (const auto& [name, p] : params_)
    if (covers(name) != Coverage::kAll) missing.push_back(name);
  const std::string tail = "\n    fix: " + fix;
  if (!wrong.empty()) throw data_error(source + ": the weights do not fit this model: " + first_names(wrong) + tail);
  if (!missing.empty()) throw data_error(source + ": no weights for " + first_names(missing) + tail);
  if (!foreign.empty()) throw data_error(source + ": weights this model does not have: " + first_names(foreign) + tail);
}

}  // namespace gputrain
