// `gputrain data prepare`: text or JSONL files -> llm.c token shards with a
// JSON sidecar each, ready for data.*.format: tokens.
//  - Documents: a whole text file, each line, or each blank-line-separated
//    paragraph; in JSONL, the string under --text-key on each line.
//  - Every document is framed by the tokenizer's special ids (tokenizer.h
//    DocumentFraming): EOT before it (GPT-2, llm.c's convention) or BOS before
//    and EOS after (Llama-style); the sidecars record the framing.
//  - Validation split: the last val_fraction of the input bytes (in input
//    order), cut at a document boundary (at a line break inside a whole-file
//    document), goes to val_*.bin; the rest to train_*.bin.
//  - Encoding runs on `threads` threads over ~4 MB chunks; output is
//    byte-identical whatever the thread count (big documents are cut only
//    where the tokenizer says the cut changes no id; most tokenizer files never allow it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/settings.h"
#include "data/tokenizer.h"
#include "util/dir_lock.h"

namespace gputrain {

enum class DocumentUnit { kFile, kLine, kParagraph };
enum class InputFormat { kAuto, kText, kJsonl };

struct PrepareOptions {
  std::vector<std::string> inputs;
  InputFormat input_format = InputFormat::kAuto;  // auto: *.jsonl / *.json are JSONL
  std::string text_key = "text";
  DocumentUnit documents = DocumentUnit::kFile;  // text inputs
  TokenizerSpec tokenizer;
  std::string output_dir;
  double val_fraction = 0.01;
  int64_t shard_tokens = 100'000'000;
  int64_t threads = 0;  // 0 = the cores this process may use
  bool overwrite = false;
  ProgressStyle progress = ProgressStyle::kAuto;
  size_t chunk_bytes = 4 << 20;  // tests use small chunks to exercise splitting
  // --format chat: JSONL rows of messages (or prompt/completion) rendered by a chat template
  // (data/chat_format.h; "" = the one the tokenizer's special tokens suggest), with a loss mask.
  bool chat = false;
  std::string chat_template;
  std::string chat_date;       // llama3.1's "Today Date" ("" = the template's own, 26 Jul 2024)
  bool skip_bad_rows = false;  // chat, preference: skip malformed rows (counted) instead of stopping
  // --format preference: pairs of completions (data/preference_prepare.h), written as
  // <split>_pairs.{bin,idx,json} (data/preference_pairs.h); truncated as TRL does (0 = no limit).
  bool preference = false;
  int64_t max_length = 0, max_prompt_length = 0;
};

struct PrepareResult {
  std::string status = "ok";  // ok | interrupted
  int signal = 0;
  int64_t input_bytes = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t train_documents = 0, val_documents = 0;
  int64_t train_pairs = 0, val_pairs = 0;  // --format preference
  int64_t dropped_pairs = 0;               // preference: prompts that fill --max-length alone (TRL drops them)
  int64_t truncated_pairs = 0;             // preference: pairs cut to --max-length / --max-prompt-length
  int64_t skipped_rows = 0;                // --skip-bad-rows
  std::string first_skipped;               // "file:line: why" of the first
  std::string chat_template;               // the one used, for --format chat
  std::string tokenizer;                   // Tokenizer::name()
  int64_t vocab_size = 0;                  // the tokenizer's: model.vocab_size must be at least this
  std::vector<std::string> shards;
  double seconds = 0;
};

// Throws a usage Error for bad options, a data Error naming the file (and
// line, for JSONL) for unreadable or malformed input. Shards appear only when
// complete; an interrupted run leaves the finished ones and no partial file.
PrepareResult prepare_dataset(const PrepareOptions& o);

// Creates and locks the output directory (one writer at a time: util/dir_lock.h); refuses to mix
// with an earlier dataset unless o.overwrite says to replace it.
DirectoryLock prepare_output(const PrepareOptions& o);

// --format preference (data/preference_prepare.cpp), its options checked by prepare_dataset.
PrepareResult prepare_preference_pairs(const PrepareOptions& o);

}  // namespace gputrain
