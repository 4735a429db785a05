// `data prepare --format preference`: preference rows (data/preference_rows.h) from JSONL (also
// .gz/.zst), Parquet and `datasets` folders -> <split>_pairs.* (data/preference_pairs.h). One
// thread: tokenizing pairs is a small cost beside training on them.
#include <chrono>
#include <cmath>
#include <filesystem>

#include "data/document_stream.h"
#include "data/jsonl_text.h"
#include "data/preference_pairs.h"
#include "data/preference_rows.h"
#include "data/prepare.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace gputrain {

namespace {

namespace fs = std::filesystem;

// Calls `row(json, place)` for every row of every input, in order; `place` is "file:line" for
// plain JSONL, "file: row N" for streamed inputs.
void for_each_row(const std::vector<std::string>& inputs,
                  const std::function<void(std::string_view, const std::string&)>& row) {
  for (const std::string& path : inputs) {
    std::error_code ec;
    if (fs::is_directory(path, ec) || is_streamed_input(path)) {
      auto stream = open_document_stream(path, "", RowKind::kPreference);
      std::vector<std::string> rows;
      int64_t n = 0;
      while (true) {
        rows.clear();
        if (stream->read(rows, 256) == 0) break;
        for (const auto& r : rows) row(r, path + ": row " + std::to_string(++n));
      }
      continue;
    }
    const MappedFile file(path);
    std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
    int64_t line_no = 0;
    for (size_t pos = 0; pos < text.size();) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string_view::npos) nl = text.size();
      std::string_view line = text.substr(pos, nl - pos);
      pos = nl + 1;
      ++line_no;
      if (is_blank_line(line)) continue;
      row(line, path + ":" + std::to_string(line_no));
    }
  }
}

}  // namespace

PrepareResult prepare_preference_pairs(const PrepareOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& path : o.inputs) {
    std::error_code ec;
    if (!fs::is_directory(path, ec) && !is_streamed_input(path) && !path.ends_with(".jsonl") &&
        !path.ends_with(".json"))
      throw usage_error("input '" + path +
                        "' is not JSONL, Parquet or Arrow\n    fix: write the pairs as JSONL, one {\"prompt\", "
                        "\"chosen\", \"rejected\"} per line");
  }
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(o.tokenizer);
  auto is_special = [&](const std::string& s) { return tokenizer->special_id(s).has_value(); };
  const ChatTemplate chat =
      o.chat_template.empty() ? default_chat_template(is_special) : chat_template_named(o.chat_template);
  PreferenceEncoder encoder(*tokenizer, chat, o.chat_date);
  const DirectoryLock output_lock = prepare_output(o);

  PrepareResult r;
  std::vector<PreferenceIds> pairs;
  bool conversations = false;
  for_each_row(o.inputs, [&](std::string_view line, const std::string& place) {
    r.input_bytes += static_cast<int64_t>(line.size()) + 1;
    PreferenceIds ids;
    try {
      const PreferenceRow row = parse_preference_row(line);
      conversations = conversations || row.conversational;
      ids = encoder.encode(row);
    } catch (const Error& e) {
      const std::string why = place + ": " + e.what();
      if (!o.skip_bad_rows)
        throw data_error(why + "\n    fix: repair the row, or pass --skip-bad-rows to skip such rows (counted)");
      if (r.skipped_rows++ == 0) r.first_skipped = why;
      return;
    }
    const size_t before = ids.prompt.size() + ids.chosen.size() + ids.rejected.size();
    if (!truncate_pair(ids, o.max_length, o.max_prompt_length)) {
      ++r.dropped_pairs;
      return;
    }
    r.truncated_pairs += ids.prompt.size() + ids.chosen.size() + ids.rejected.size() < before;
    pairs.push_back(std::move(ids));
  });
  if (pairs.empty())
    throw data_error("no pair is left of the inputs (" + std::to_string(r.skipped_rows) + " bad rows skipped, " +
                     std::to_string(r.dropped_pairs) +
                     " prompts filling --max-length)\n    fix: check the rows, or raise --max-length");

  PreferenceSidecar info;
  info.tokenizer = tokenizer->name();
  info.tokenizer_crc32c = tokenizer->file_crc32c();
  info.vocab_size = tokenizer->vocab_size();
  info.max_length = o.max_length, info.max_prompt_length = o.max_prompt_length;
  // The last val_fraction of the pairs, in input order, are held out (at least one where asked for).
  const auto n = static_cast<int64_t>(pairs.size());
  int64_t val = static_cast<int64_t>(std::llround(o.val_fraction * static_cast<double>(n)));
  if (o.val_fraction > 0 && val == 0 && n > 1) val = 1;
  PreferencePairWriter train(o.output_dir, "train", info), held_out(o.output_dir, "val", info);
  for (int64_t i = 0; i < n; ++i) {
    const PreferenceIds& p = pairs[static_cast<size_t>(i)];
    (i < n - val ? train : held_out).add(p.prompt, p.chosen, p.rejected);
  }
  train.finish();
  r.shards.push_back(pairs_path(o.output_dir, "train", "bin"));
  if (val > 0) {
    held_out.finish();
    r.shards.push_back(pairs_path(o.output_dir, "val", "bin"));
  }
  r.train_pairs = n - val, r.val_pairs = val;
  r.train_tokens = train.info().tokens, r.val_tokens = held_out.info().tokens;
  r.chat_template = conversations ? chat_template_name(chat) : "";
  r.tokenizer = tokenizer->name();
  r.vocab_size = tokenizer->vocab_size();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace gputrain
