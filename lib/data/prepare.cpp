#include "data/prepare.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "data/chat_format.h"
#include "data/document_stream.h"
#include "data/jsonl_text.h"
#include "data/token_shard.h"
#include "metrics/progress.h"
#include "util/device.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/signals.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Input {
  std::unique_ptr<MappedFile> file;  // memory-mapped inputs
  InputFormat format;
  int64_t base = 0;                      // offset of its first byte in the concatenated input
  std::unique_ptr<DocumentStream> rows;  // streamed inputs (document_stream.h) instead
  std::string_view text() const { return {reinterpret_cast<const char*>(file->data()), file->size()}; }
};

// A piece of one input, encoded by one worker.
struct Chunk {
  size_t input;
  size_t begin, end;
  bool val;
  bool starts_document;  // false only for the continuation of a whole-file document
  bool ends_document;    // false only for a whole-file document's part that another part continues
  int64_t rows = 0;      // streamed inputs: the next `rows` rows of the stream, from row `begin`
};

struct Encoded {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> mask;  // chat: one byte per token, 1 = takes loss
  int64_t skipped = 0;        // chat rows skipped (--skip-bad-rows)
  std::string first_skipped;
  std::vector<size_t> document_starts;  // offsets into tokens of each document's first (framing) id
  int64_t text_bytes = 0;
};

// Streamed chunks hold this many rows (documents): ~1-4 MB of typical web text.
constexpr int64_t kRowsPerChunk = 512;

// The first document boundary at or after `target` in `text`: the offset just
// after a line break (lines, JSONL), after an empty line (paragraphs), or a
// cut the tokenizer allows (whole-file documents). text.size() if none.
size_t boundary_at_or_after(std::string_view text, size_t target, DocumentUnit unit, InputFormat format,
                            const Tokenizer& tokenizer) {
  if (target >= text.size()) return text.size();
  if (target == 0) return 0;
  if (format == InputFormat::kJsonl || unit == DocumentUnit::kLine) {
    const size_t nl = text.find('\n', target - 1);
    return nl == std::string_view::npos ? text.size() : nl + 1;
  }
  if (unit == DocumentUnit::kParagraph) {
    const size_t gap = text.find("\n\n", target >= 2 ? target - 2 : 0);
    return gap == std::string_view::npos ? text.size() : gap + 2;
  }
  const size_t safe = tokenizer.safe_split_point(text, target, text.size());
  return safe == std::string_view::npos ? text.size() : safe;
}

// The last document boundary before `target` (0 if none).
// (For a whole-file document any line break will do: the split starts a new document.)
size_t boundary_before(std::string_view text, size_t target, DocumentUnit unit, InputFormat format) {
  if (format != InputFormat::kJsonl && unit == DocumentUnit::kParagraph) {
    const size_t gap = target >= 3 ? text.rfind("\n\n", target - 3) : std::string_view::npos;
    return gap == std::string_view::npos ? 0 : gap + 2;
  }
  const size_t nl = target >= 2 ? text.rfind('\n', target - 2) : std::string_view::npos;
  return nl == std::string_view::npos ? 0 : nl + 1;
}

int64_t line_number(std::string_view text, size_t offset) {
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
}

class ChunkEncoder {
 public:
  ChunkEncoder(const Tokenizer& t, const PrepareOptions& o, std::optional<ChatTemplate> chat)
      : tokenizer_(t), enc_(t.make_encoder()), framing_(t.framing()), o_(o), chat_(chat) {}

  // The documents (or chat rows) of a streamed chunk.
  Encoded encode(const std::vector<std::string>& docs, const Chunk& c, const std::string& path) {
    Encoded out;
    for (size_t i = 0; i < docs.size(); ++i) {
      const std::string& d = docs[i];
      out.text_bytes += static_cast<int64_t>(d.size());
      if (chat_) {
        chat_document(out, d, [&] { return path + ": row " + std::to_string(c.begin + i + 1); });
        continue;
      }
      if (d.empty()) continue;
      out.document_starts.push_back(out.tokens.size());
      out.tokens.insert(out.tokens.end(), framing_.before.begin(), framing_.before.end());
      enc_->encode(d, out.tokens);
      out.tokens.insert(out.tokens.end(), framing_.after.begin(), framing_.after.end());
    }
    return out;
  }

  Encoded encode(const Input& in, const Chunk& c) {
    Encoded out;
    out.text_bytes = static_cast<int64_t>(c.end - c.begin);
    const std::string_view all = in.text();
    const std::string_view text = all.substr(c.begin, c.end - c.begin);
    auto document = [&](std::string_view doc) {
      if (doc.empty()) return;
      out.document_starts.push_back(out.tokens.size());
      out.tokens.insert(out.tokens.end(), framing_.before.begin(), framing_.before.end());
      enc_->encode(doc, out.tokens);
      out.tokens.insert(out.tokens.end(), framing_.after.begin(), framing_.after.end());
    };
    if (in.format == InputFormat::kJsonl) {
      for (size_t pos = 0; pos < text.size();) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        const std::string_view line = text.substr(pos, nl - pos);
        if (is_blank_line(line)) {
        } else if (chat_) {
          chat_document(out, line,
                        [&] { return in.file->path() + ":" + std::to_string(line_number(all, c.begin + pos)); });
        } else {
          document(json_text(in, line, c.begin + pos));
        }
        pos = nl + 1;
      }
    } else if (o_.documents == DocumentUnit::kFile) {
      if (c.starts_document) {
        out.document_starts.push_back(out.tokens.size());
        out.tokens.insert(out.tokens.end(), framing_.before.begin(), framing_.before.end());
      }
      enc_->encode(text, out.tokens);
      if (c.ends_document) out.tokens.insert(out.tokens.end(), framing_.after.begin(), framing_.after.end());
    } else if (o_.documents == DocumentUnit::kLine) {
      for (size_t pos = 0; pos < text.size();) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        std::string_view line = text.substr(pos, nl - pos);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (!is_blank_line(line)) document(line);
        pos = nl + 1;
      }
    } else {  // paragraphs: runs of non-blank lines, without the final line break
      size_t start = std::string_view::npos, last_end = 0;
      auto flush = [&] {
        if (start != std::string_view::npos) document(text.substr(start, last_end - start));
        start = std::string_view::npos;
      };
      for (size_t pos = 0; pos < text.size();) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        if (is_blank_line(text.substr(pos, nl - pos))) {
          flush();
        } else {
          if (start == std::string_view::npos) start = pos;
          last_end = nl;
        }
        pos = nl + 1;
      }
      flush();
    }
    return out;
  }

 private:
  // One chat row: framing, then the template's pieces, with their loss flags.
  void chat_document(Encoded& out, std::string_view line, const std::function<std::string()>& place) {
    auto is_special = [&](const std::string& s) { return tokenizer_.special_id(s).has_value(); };
    std::vector<ChatPiece> pieces;
    try {
      pieces = render_chat(*chat_, parse_chat_row(line), is_special,
                           o_.chat_date.empty() ? kLlama31DefaultDate : o_.chat_date);
    } catch (const Error& e) {
      const std::string why = place() + ": " + e.what();
      if (!o_.skip_bad_rows)
        throw data_error(why + "\n    fix: repair the row, or pass --skip-bad-rows to skip such rows (counted)");
      if (out.skipped++ == 0) out.first_skipped = why;
      return;
    }
    out.document_starts.push_back(out.tokens.size());
    out.tokens.insert(out.tokens.end(), framing_.before.begin(), framing_.before.end());
    out.mask.resize(out.tokens.size(), 0);
    for (const ChatPiece& p : pieces) {
      if (p.kind == ChatPiece::Kind::kText) {
        enc_->encode_continuation(p.text, out.tokens);  // after the framing's BOS or a template's token
      } else if (p.kind == ChatPiece::Kind::kEndOfText) {
        out.tokens.push_back(static_cast<uint32_t>(framing_.eos >= 0 ? framing_.eos : framing_.before.front()));
      } else if (auto id = tokenizer_.special_id(p.text)) {
        out.tokens.push_back(*id);
      } else {
        throw data_error("the " + std::string(chat_template_name(*chat_)) + " chat template needs the special token " +
                         p.text + ", which tokenizer " + tokenizer_.name() +
                         " does not have\n    fix: pass --chat-template plain (or the template this tokenizer was "
                         "trained with)");
      }
      out.mask.resize(out.tokens.size(), p.trained ? 1 : 0);
    }
    out.tokens.insert(out.tokens.end(), framing_.after.begin(), framing_.after.end());
    out.mask.resize(out.tokens.size(), 0);
  }

  std::string json_text(const Input& in, std::string_view line, size_t offset) {
    return jsonl_text(line, o_.text_key, [&] {  // the line number is counted only for an error
      return in.file->path() + ":" + std::to_string(line_number(in.text(), offset));
    });
  }

  const Tokenizer& tokenizer_;
  std::unique_ptr<TokenEncoder> enc_;
  const DocumentFraming& framing_;
  const PrepareOptions& o_;
  std::optional<ChatTemplate> chat_;
};

// Writes one split (train or val) as a sequence of shards.
class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string split, ShardInfo info, int64_t shard_tokens)
      : dir_(std::move(dir)), split_(std::move(split)), info_(std::move(info)), shard_tokens_(shard_tokens) {
    info_.split = split_;
  }

  void write(const Encoded& e, PrepareResult& r) {
    size_t next_doc = 0;
    for (size_t pos = 0; pos < e.tokens.size();) {
      if (!shard_ || shard_->tokens() == shard_tokens_) open_next(r);
      const size_t n = std::min(e.tokens.size() - pos, static_cast<size_t>(shard_tokens_ - shard_->tokens()));
      while (next_doc < e.document_starts.size() && e.document_starts[next_doc] < pos + n) {
        shard_->add_document();
        ++documents_;
        ++next_doc;
      }
      if (e.mask.empty()) {
        shard_->append(std::span<const uint32_t>(e.tokens).subspan(pos, n));
      } else {
        shard_->append(std::span<const uint32_t>(e.tokens).subspan(pos, n),
                       std::span<const uint8_t>(e.mask).subspan(pos, n));
      }
      tokens_ += static_cast<int64_t>(n);
      pos += n;
    }
  }
  void finish(PrepareResult& r) {
    if (!shard_) return;
    shard_->finish();
    r.shards.push_back(shard_->path());
    shard_.reset();
  }
  int64_t tokens() const { return tokens_; }
  int64_t documents() const { return documents_; }

 private:
  void open_next(PrepareResult& r) {
    finish(r);
    char name[64];
    std::snprintf(name, sizeof name, "%s_%06d.bin", split_.c_str(), index_++);
    shard_ = std::make_unique<ShardWriter>((fs::path(dir_) / name).string(), info_);
  }

  std::string dir_, split_;
  ShardInfo info_;
  int64_t shard_tokens_;
  int index_ = 0;
  std::unique_ptr<ShardWriter> shard_;
  int64_t tokens_ = 0, documents_ = 0;
};

void check_options(const PrepareOptions& o) {
  if (o.inputs.empty()) throw usage_error("data prepare needs at least one input file\n    fix: pass --input FILE");
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
    throw usage_error("--val-fraction must be in [0, 1), got " + std::to_string(o.val_fraction));
  if (o.shard_tokens < 1 || o.shard_tokens > kLlmcMaxTokens)
    throw usage_error("--shard-tokens must be in [1, 2^31 - 1], got " + std::to_string(o.shard_tokens));
  if (o.output_dir.empty()) throw usage_error("data prepare needs an output directory\n    fix: pass --output DIR");
  if (o.text_key.empty()) throw usage_error("--text-key must not be empty");
  if (!o.chat && !o.preference && (!o.chat_template.empty() || !o.chat_date.empty() || o.skip_bad_rows))
    throw usage_error(
        "--chat-template, --chat-date and --skip-bad-rows apply to chat rows\n    fix: add --format chat");
  if (!o.preference && (o.max_length != 0 || o.max_prompt_length != 0))
    throw usage_error(
        "--max-length and --max-prompt-length truncate preference pairs\n    fix: add --format preference, "
        "or drop them (text is cut into windows of model.seq_len when it trains)");
  if (o.max_length < 0 || o.max_prompt_length < 0)
    throw usage_error("--max-length and --max-prompt-length must be 0 (no limit) or more");
  if (o.max_length > 0 && o.max_prompt_length >= o.max_length)
    throw usage_error("--max-prompt-length (" + std::to_string(o.max_prompt_length) + ") must be below --max-length (" +
                      std::to_string(o.max_length) + "), or no completion token would be left");
}

}  // namespace

DirectoryLock prepare_output(const PrepareOptions& o) {
  std::error_code ec;
  fs::create_directories(o.output_dir, ec);
  if (ec || !fs::is_directory(o.output_dir))
    throw usage_error("cannot create output directory '" + o.output_dir + "'" + (ec ? ": " + ec.message() : ""));
  DirectoryLock lock = DirectoryLock::acquire(o.output_dir, "use another --output");
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(o.output_dir)) {
    const std::string name = e.path().filename().string();
    if ((name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) &&
        (e.path().extension() == ".bin" || e.path().extension() == ".json" || e.path().extension() == ".partial" ||
         e.path().extension() == ".idx" || e.path().extension() == ".tmp"))
      old.push_back(e.path());
  }
  if (old.empty()) return lock;
  if (!o.overwrite)
    throw usage_error("output directory '" + o.output_dir + "' already holds shards (" +
                      old.front().filename().string() +
                      ", ...)\n    fix: choose another --output, or pass --overwrite to replace them");
  for (const auto& p : old) fs::remove(p);
  return lock;
}

namespace {

InputFormat format_of(const std::string& path, InputFormat requested) {
  if (requested != InputFormat::kAuto) return requested;
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".json" ? InputFormat::kJsonl : InputFormat::kText;
}

// Splits every input into chunks and marks those after the validation cut.
std::vector<Chunk> plan_chunks(const std::vector<Input>& inputs, const PrepareOptions& o, int64_t total,
                               const Tokenizer& tokenizer) {
  // Where validation starts: (input index, byte offset), the first document
  // boundary at or after the cut; else the last one before it.
  size_t val_input = inputs.size(), val_offset = 0;
  if (o.val_fraction > 0) {
    const auto cut = static_cast<int64_t>(static_cast<double>(total) * (1.0 - o.val_fraction));
    size_t k = 0;
    while (k + 1 < inputs.size() && inputs[k + 1].base <= cut) ++k;
    const std::string_view text = inputs[k].text();
    size_t b =
        boundary_at_or_after(text, static_cast<size_t>(cut - inputs[k].base), o.documents, inputs[k].format, tokenizer);
    if (b < text.size()) {
      val_input = k, val_offset = b;
    } else if (k + 1 < inputs.size()) {
      val_input = k + 1, val_offset = 0;
    } else if ((b = boundary_before(text, static_cast<size_t>(cut - inputs[k].base), o.documents, inputs[k].format)) >
                   0 ||
               k > 0) {
      val_input = k, val_offset = b;
    } else {
      spdlog::warn(
          "data prepare: the input has no document boundary or line break to split at, so the validation "
          "split is empty (use --documents lines or paragraphs, or --val-fraction 0)");
    }
  }
  std::vector<Chunk> chunks;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::string_view text = inputs[k].text();
    for (size_t pos = 0; pos < text.size();) {
      size_t end = boundary_at_or_after(text, std::min(text.size(), pos + o.chunk_bytes), o.documents, inputs[k].format,
                                        tokenizer);
      if (k == val_input && pos < val_offset && val_offset < end) end = val_offset;
      const bool val = k > val_input || (k == val_input && pos >= val_offset);
      const bool whole_file = inputs[k].format != InputFormat::kJsonl && o.documents == DocumentUnit::kFile;
      const bool starts = !whole_file || pos == 0 || (k == val_input && pos == val_offset);
      const bool ends = !whole_file || end == text.size() || (k == val_input && end == val_offset);
      chunks.push_back(Chunk{k, pos, end, val, starts, ends});
      pos = end;
    }
  }
  return chunks;
}

// Streamed inputs: chunks of kRowsPerChunk rows, in order; the last
// val_fraction of all the rows (counted first) is the validation split.
std::vector<Chunk> plan_stream_chunks(const std::vector<Input>& inputs, const PrepareOptions& o, int64_t& total_rows) {
  std::vector<int64_t> rows;
  total_rows = 0;
  for (const auto& in : inputs) total_rows += rows.emplace_back(in.rows->rows());
  int64_t val_rows = 0;
  if (o.val_fraction > 0 && total_rows < 2) {
    spdlog::warn("data prepare: the input has fewer than 2 rows, so the validation split is empty");
  } else if (o.val_fraction > 0) {
    val_rows = std::clamp<int64_t>(std::llround(static_cast<double>(total_rows) * o.val_fraction), 1, total_rows - 1);
  }
  const int64_t first_val = total_rows - val_rows;
  std::vector<Chunk> chunks;
  int64_t row = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    for (int64_t r = 0; r < rows[k];) {
      int64_t n = std::min(kRowsPerChunk, rows[k] - r);
      if (row < first_val && row + n > first_val) n = first_val - row;
      chunks.push_back(Chunk{k, static_cast<size_t>(r), 0, row >= first_val, true, true, n});  // begin: its first row
      r += n, row += n;
    }
  }
  return chunks;
}

// Reads exactly `n` rows (a chunk's) from a stream.
void read_rows(DocumentStream& stream, int64_t n, std::vector<std::string>& out) {
  out.clear();
  while (static_cast<int64_t>(out.size()) < n)
    if (stream.read(out, static_cast<size_t>(n) - out.size()) == 0)
      throw data_error("'" + stream.path() +
                       "' ended before the rows it declared\n    fix: check the file is complete");
}

// Opens every input: memory-mapped, or as a stream of rows when any is streamed (`total`: mapped bytes).
std::vector<Input> open_inputs(const PrepareOptions& o, bool streaming, int64_t& total) {
  std::vector<Input> inputs;
  for (const auto& path : o.inputs) {
    if (streaming) {
      if (!is_streamed_input(path) && format_of(path, o.input_format) != InputFormat::kJsonl)
        throw usage_error("input '" + path +
                          "' is plain text, which cannot be mixed with Parquet, Arrow or compressed inputs"
                          "\n    fix: prepare it in a run of its own, or convert it to JSONL");
      Input in{nullptr, InputFormat::kJsonl, 0,
               open_document_stream(path, o.text_key, o.chat ? RowKind::kChat : RowKind::kText)};
      if (in.rows->rows() == 0)
        throw data_error("input '" + path + "' has no rows\n    fix: remove it from the inputs");
      inputs.push_back(std::move(in));
      continue;
    }
    std::error_code ec;
    if (fs::is_directory(path, ec))
      throw data_error("input '" + path + "' is a directory\n    fix: pass the files, e.g. --input " +
                       (fs::path(path) / "*.txt").string());
    Input in{std::make_unique<MappedFile>(path), format_of(path, o.input_format), total};
    if (in.file->size() == 0) throw data_error("input '" + path + "' is empty\n    fix: remove it from the inputs");
    total += static_cast<int64_t>(in.file->size());
    inputs.push_back(std::move(in));
  }
  return inputs;
}

// --format chat: the template (named, or the one the tokenizer's special tokens suggest); rows only.
std::optional<ChatTemplate> chat_template_for(const PrepareOptions& o, const Tokenizer& t,
                                              const std::vector<Input>& inputs) {
  if (!o.chat) return std::nullopt;
  for (const auto& in : inputs)
    if (!in.rows && in.format != InputFormat::kJsonl)
      throw usage_error("--format chat reads JSONL, Parquet or Arrow rows, but '" + in.file->path() +
                        "' is text\n    fix: write the chat rows as JSONL, one {\"messages\": [...]} per line");
  const ChatTemplate chosen =
      !o.chat_template.empty()
          ? chat_template_named(o.chat_template)
          : default_chat_template([&](const std::string& s) { return t.special_id(s).has_value(); });
  if (!o.chat_date.empty() && chosen != ChatTemplate::kLlama31)
    throw usage_error("--chat-date is the llama3.1 template's \"Today Date\", but these rows are rendered with the " +
                      std::string(chat_template_name(chosen)) +
                      " template, which writes no date\n    fix: drop --chat-date, or pass --chat-template llama3.1");
  return chosen;
}

// What every shard's sidecar says (token_shard.h).
ShardInfo shard_info(const Tokenizer& t, const PrepareOptions& o) {
  ShardInfo info;
  info.tokenizer = t.name();
  info.tokenizer_kind = t.kind();
  info.tokenizer_crc32c = t.file_crc32c();
  info.vocab_size = t.vocab_size();
  const DocumentFraming& framing = t.framing();
  info.eot_token = t.document_start_id();
  info.bos_token = framing.bos, info.eos_token = framing.eos, info.pad_token = framing.pad;
  info.document_before = framing.before, info.document_after = framing.after;
  info.dtype = t.vocab_size() <= 65536 ? TokenDtype::kUint16 : TokenDtype::kUint32;
  info.loss_mask = o.chat;
  return info;
}

}  // namespace

PrepareResult prepare_dataset(const PrepareOptions& o) {
  check_options(o);
  if (o.preference) return prepare_preference_pairs(o);
  const auto t0 = Clock::now();
  // Parquet, Arrow and compressed inputs are read front to back (document_stream.h); then all are.
  const bool streaming = std::any_of(o.inputs.begin(), o.inputs.end(), is_streamed_input);
  int64_t total = 0;
  std::vector<Input> inputs = open_inputs(o, streaming, total);
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(o.tokenizer);
  const std::optional<ChatTemplate> chat = chat_template_for(o, *tokenizer, inputs);
  const DirectoryLock output_lock = prepare_output(o);
  const ShardInfo info = shard_info(*tokenizer, o);
  SplitWriter train(o.output_dir, "train", info, o.shard_tokens);
  SplitWriter val(o.output_dir, "val", info, o.shard_tokens);

  int64_t total_rows = 0;
  const std::vector<Chunk> chunks =
      streaming ? plan_stream_chunks(inputs, o, total_rows) : plan_chunks(inputs, o, total, *tokenizer);
  const int64_t threads = std::max<int64_t>(1, o.threads > 0 ? o.threads : resolve_threads(0));
  const size_t max_ahead = static_cast<size_t>(4 * threads);

  // Workers encode chunks in any order; this thread writes them in order.
  std::mutex mu;
  std::condition_variable cv;
  std::map<size_t, Encoded> done;
  size_t next_claim = 0, next_write = 0;
  bool stop = false;
  // A chunk's error is raised when the writer reaches that chunk, so the first bad row in input
  // order is the one reported, whichever thread met its own first (no chunk after it is claimed).
  std::map<size_t, std::exception_ptr> errors;
  auto fail = [&](size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    errors.emplace(std::max(i, next_write), std::current_exception());
    stop = true;
  };
  auto worker = [&] {
    ChunkEncoder enc(*tokenizer, o, chat);
    std::vector<std::string> docs;
    while (true) {
      size_t i = 0;
      try {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || next_claim >= chunks.size() || next_claim < next_write + max_ahead; });
        if (stop || next_claim >= chunks.size()) return;
        i = next_claim++;
        // Streams are read in claim order, under the lock; encoding runs in parallel.
        if (chunks[i].rows > 0) read_rows(*inputs[chunks[i].input].rows, chunks[i].rows, docs);
      } catch (...) {  // reading chunk i's rows
        fail(i);
        cv.notify_all();
        return;
      }
      try {
        const Input& in = inputs[chunks[i].input];
        Encoded e = chunks[i].rows > 0 ? enc.encode(docs, chunks[i], in.rows->path()) : enc.encode(in, chunks[i]);
        std::lock_guard<std::mutex> lock(mu);
        done.emplace(i, std::move(e));
      } catch (...) {
        fail(i);
      }
      cv.notify_all();
    }
  };

  PrepareResult r;
  r.tokenizer = tokenizer->name();
  r.vocab_size = tokenizer->vocab_size();
  StopSignals signals;
  Progress progress(o.progress, 0);
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) pool.emplace_back(worker);
  auto stop_workers = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : pool) t.join();
    pool.clear();
  };

  // Progress in bytes for mapped inputs, in rows for streamed ones (whose text size is not known ahead).
  int64_t bytes_done = 0, rows_done = 0;
  const double work_total = static_cast<double>(streaming ? total_rows : total);
  auto last_shown = Clock::now() - std::chrono::hours(1);
  try {
    while (next_write < chunks.size()) {
      Encoded e;
      {
        std::unique_lock<std::mutex> lock(mu);
        // Wake regularly to notice a stop signal while workers are busy.
        while (errors.count(next_write) == 0 && done.count(next_write) == 0 && StopSignals::requested() == 0)
          cv.wait_for(lock, std::chrono::milliseconds(100));
        if (auto it = errors.find(next_write); it != errors.end()) std::rethrow_exception(it->second);
        if (StopSignals::requested() != 0) break;
        e = std::move(done.at(next_write));
        done.erase(next_write);
      }
      const Chunk& c = chunks[next_write];
      (c.val ? val : train).write(e, r);
      if (e.skipped > 0 && r.skipped_rows == 0) r.first_skipped = e.first_skipped;
      r.skipped_rows += e.skipped;
      bytes_done += e.text_bytes;
      rows_done += c.rows;
      {
        std::lock_guard<std::mutex> lock(mu);
        ++next_write;
      }
      cv.notify_all();
      const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
      if (Clock::now() - last_shown > std::chrono::milliseconds(250) || next_write == chunks.size()) {
        last_shown = Clock::now();
        const double fraction = static_cast<double>(streaming ? rows_done : bytes_done) / work_total;
        char line[256];
        std::snprintf(line, sizeof line, "prepare: %5.1f%% | %.1f MB | %lld tokens | %.1f MB/s | ETA %s",
                      100.0 * fraction, bytes_done / 1e6, static_cast<long long>(train.tokens() + val.tokens()),
                      bytes_done / 1e6 / elapsed,
                      format_duration(elapsed * (1.0 - fraction) / std::max(1e-9, fraction)).c_str());
        progress.show(line);
      }
    }
  } catch (...) {
    stop_workers();
    progress.finish();
    throw;  // the writers' destructors remove their partial shards
  }
  stop_workers();
  progress.finish();
  if (StopSignals::requested() != 0) {
    r.status = "interrupted";
    r.signal = StopSignals::requested();
  } else {
    train.finish(r);
    val.finish(r);
  }
  r.train_tokens = train.tokens(), r.val_tokens = val.tokens();
  r.train_documents = train.documents(), r.val_documents = val.documents();
  r.input_bytes = bytes_done;  // the text encoded (the file sizes, for mapped inputs)
  if (chat) r.chat_template = chat_template_name(*chat);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace gputrain
