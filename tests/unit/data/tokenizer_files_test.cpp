// Tokenizer files: our reading of Hugging Face tokenizer.json files (the
// Llama 3, Qwen2, Mistral Nemo, Mistral/Llama 2, Gemma, GPT-2 layouts and a
// BPE trained with other components) and of SentencePiece models gives the
// reference libraries' ids (tokenizers, sentencepiece: run through Python)
// on varied text; framing, overrides and bad files.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "data/utf8_repair.h"
#include "test_util.h"
#include "unit/data/tokenizer_texts.h"
#include "util/error.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Contains;

namespace {

namespace fs = std::filesystem;

std::vector<uint32_t> encode(const Tokenizer& t, std::string_view text) {
  std::vector<uint32_t> ids;
  t.make_encoder()->encode(text, ids);
  return ids;
}

void check_equal_ids(const std::string& tokenizer_path, const std::string& reference_file) {
  auto t = make_tokenizer({tokenizer_path});
  const auto texts = tokenizer_file_text();
  const auto want = reference_token_ids(reference_file, texts);
  REQUIRE(want.size() == texts.size());
  auto enc = t->make_encoder();  // one encoder for all: its caches must not change results
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<uint32_t> got;
    enc->encode(texts[i], got);
    INFO(tokenizer_path << " text #" << i << ": "
                        << nlohmann::json(texts[i]).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    CHECK(got == want[i]);
    mismatches += got != want[i];
    for (uint32_t id : got) REQUIRE(id < t->vocab_size());
  }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("tokenizer.json ids equal HF tokenizers' for each family's layout", "[data][tokenizer]") {
  for (const char* name : {"gpt2", "llama3", "qwen2", "tekken", "mistral", "llama2_legacy", "gemma", "wordy"}) {
    SECTION(name) { check_equal_ids(reference_tokenizer(name), reference_tokenizer(name) + "/tokenizer.json"); }
  }
}

TEST_CASE("SentencePiece model ids equal the sentencepiece library's", "[data][tokenizer]") {
  for (const char* name : {"tokenizer.model.v1.model", "mistral_instruct_tokenizer_240323.model.v3.model",
                           "mistral_instruct_tokenizer_241114.model.v7.model"}) {
    SECTION(name) {
      const std::string path = reference_tokenizer("sentencepiece/") + name;
      check_equal_ids(path, path);
    }
  }
}

TEST_CASE("text after a special token: no first-word prefix, as transformers encodes a SentencePiece model's",
          "[data][tokenizer]") {
  // What transformers' Llama tokenizer (legacy=False) and mistral_common encode after a special token:
  // " x" is the library's ids of x, whose dummy prefix is the space.
  const std::string path = reference_tokenizer("sentencepiece/mistral_instruct_tokenizer_240323.model.v3.model");
  auto t = make_tokenizer({path});
  const std::vector<std::string> texts = {"Bonjour ! Ça va ?", "  two spaces", "\nline", "x"};
  const auto want = reference_token_ids(path, texts);
  auto enc = t->make_encoder();
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<uint32_t> got;
    enc->encode_continuation(std::string(" ") + texts[i], got);
    CHECK(got == want[i]);
  }
  std::vector<uint32_t> space;
  enc->encode_continuation(" ", space);
  CHECK(space == std::vector<uint32_t>{29473});  // the v3 model's piece "▁"
  // tokenizer.json with Metaspace's "first" scheme: the marker only where a document starts, so that
  // after a special token " Bonjour" is what "Bonjour" is at a document's start (HF tokenizers' ids).
  const std::string mistral = reference_tokenizer("mistral");
  auto hf = make_tokenizer({mistral});
  std::vector<uint32_t> bare, spaced;
  hf->make_encoder()->encode_continuation("Bonjour", bare);
  hf->make_encoder()->encode_continuation(" Bonjour", spaced);
  const auto at_start = reference_token_ids(mistral + "/tokenizer.json", {"Bonjour"})[0];
  CHECK(spaced == at_start);
  CHECK(bare != at_start);
  CHECK(encode(*hf, "Bonjour") == at_start);
}

TEST_CASE("tokenizer files give the reference ids on all of tinyshakespeare", "[data][tokenizer]") {
  const std::string text = read_file(shared_data("tinyshakespeare.txt"));
  for (const char* name : {"llama3", "mistral"}) {
    SECTION(name) {
      auto t = make_tokenizer({reference_tokenizer(name)});
      CommandResult r = run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/tokenize_reference.py",
                                    reference_tokenizer(name) + "/tokenizer.json", shared_data("tinyshakespeare.txt"),
                                    reference_tokenizer(name) + "/ts.json"});
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      const auto want = read_json(reference_tokenizer(name) + "/ts.json")[0].get<std::vector<uint32_t>>();
      const auto got = encode(*t, text);
      CHECK(got.size() == want.size());
      CHECK(got == want);
    }
  }
}

TEST_CASE("GPT-2's tokenizer.json is the gpt2 tokenizer: same ids, same framing", "[data][tokenizer]") {
  auto file = make_tokenizer({reference_tokenizer("gpt2")});
  auto gpt2 = make_tokenizer({"gpt2", shared_data("gpt2/encoder.json"), shared_data("gpt2/vocab.bpe")});
  CHECK(file->kind() == "tokenizer.json");
  CHECK(file->vocab_size() == 50257);
  CHECK(file->framing().before == std::vector<uint32_t>{50256});
  CHECK(file->framing().after.empty());
  const std::string text = read_file(shared_data("tinyshakespeare.txt")).substr(0, 300000);
  CHECK(encode(*file, text) == encode(*gpt2, text));
  CHECK(file->decode(encode(*file, text)) == text);
  // Byte-level files cut documents where GPT-2 does; Metaspace ones never.
  CHECK(file->safe_split_point("ab\ncd", 0, 100) == 3);
  CHECK(make_tokenizer({reference_tokenizer("mistral")})->safe_split_point("ab\ncd", 0, 100) == std::string_view::npos);
}

TEST_CASE("decoding tokenizer-file ids gives the reference library's text, and the text back", "[data][tokenizer]") {
  for (const char* name : {"gpt2", "llama3", "qwen2", "tekken", "mistral", "llama2_legacy", "gemma",
                           "sentencepiece/tokenizer.model.v1.model"}) {
    SECTION(name) {
      const std::string path = reference_tokenizer(name);
      const std::string reference_file = fs::is_directory(path) ? path + "/tokenizer.json" : path;
      auto t = make_tokenizer({path});
      // Each text's ids, and runs of ids the encoder never writes together (special tokens included),
      // decoded by us and by HF tokenizers / sentencepiece.
      std::vector<std::vector<uint32_t>> ids;
      for (const auto& text : varied_text()) ids.push_back(encode(*t, text));
      const uint32_t n = static_cast<uint32_t>(t->vocab_size());
      for (uint32_t start : {0u, 1u, 2u, 3u, 100u, n / 2, n - 40})
        ids.push_back([&] {
          std::vector<uint32_t> run;
          for (uint32_t i = start; i < std::min(n, start + 40); ++i) run.push_back(i);
          return run;
        }());
      // decode gives bytes (generate streams a character once its last byte arrives), the libraries give
      // text: where the bytes are not valid UTF-8 (a run cut inside a character), theirs has U+FFFD
      // for each ill-formed piece, as Python's errors="replace" (utf8_repair.h) makes of ours.
      const auto want = reference_decode(reference_file, ids);
      REQUIRE(want.size() == ids.size());
      int repaired = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        INFO("ids #" << i << ": " << nlohmann::json(ids[i]).dump());
        const std::string got = t->decode(ids[i]);
        std::string scratch;
        CHECK(std::string(repair_utf8(got, scratch)) == want[i]);
        repaired += valid_utf8_prefix(got) != got.size();
      }
      CHECK(repaired < 4);  // nearly all are valid UTF-8, compared byte for byte
      // tokenizers' Metaspace decoding strips one leading space (the one encoding
      // prepends), so a text that starts with its own comes back without it (SentencePiece keeps it).
      // qwen2 (NFC) and gemma (spaces replaced) change the text as they encode: no round trip for them.
      const bool strips = std::string(name) == "mistral";
      const bool normalizes = std::string(name) == "qwen2" || std::string(name) == "gemma";
      for (const auto& text : normalizes ? std::vector<std::string>{} : varied_text()) {
        INFO(nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        CHECK(t->decode(encode(*t, text)) == (strips && text.starts_with(' ') ? text.substr(1) : text));
      }
    }
  }
}

TEST_CASE("documents are framed with the tokenizer's BOS/EOS, from the file, its config or the flags",
          "[data][tokenizer]") {
  auto framing = [](const TokenizerSpec& s) { return make_tokenizer(s)->framing(); };
  auto llama3 = make_tokenizer({reference_tokenizer("llama3")});
  const auto begin = static_cast<uint32_t>(llama3->framing().bos), end = static_cast<uint32_t>(llama3->framing().eos);
  CHECK(llama3->decode(std::vector<uint32_t>{begin}) == "<|begin_of_text|>");  // the template's BOS
  CHECK(llama3->decode(std::vector<uint32_t>{end}) == "<|end_of_text|>");      // the family's end-of-text
  CHECK(llama3->framing().before == std::vector<uint32_t>{begin});
  CHECK(llama3->framing().after == std::vector<uint32_t>{end});
  // Qwen2: no BOS; its tokenizer_config.json names the end-of-text token, written before each document.
  auto qwen = make_tokenizer({reference_tokenizer("qwen2")});
  CHECK(qwen->framing().bos == -1);
  CHECK(qwen->decode(std::vector<uint32_t>{qwen->document_start_id()}) == "<|endoftext|>");
  CHECK(qwen->framing().after.empty());
  CHECK(qwen->framing().pad == qwen->framing().eos);
  CHECK(framing({reference_tokenizer("mistral")}).before == std::vector<uint32_t>{1});
  CHECK(framing({reference_tokenizer("mistral")}).after == std::vector<uint32_t>{2});
  CHECK(framing({reference_tokenizer("sentencepiece/tokenizer.model.v1.model")}).before == std::vector<uint32_t>{1});
  CHECK(framing({reference_tokenizer("sentencepiece/tokenizer.model.v1.model")}).after == std::vector<uint32_t>{2});
  // Overrides.
  CHECK(framing({reference_tokenizer("mistral"), "", "", "none"}).before == std::vector<uint32_t>{2});
  CHECK(framing({reference_tokenizer("mistral"), "", "", "none"}).after.empty());
  CHECK(framing({reference_tokenizer("mistral"), "", "", "", "<unk>"}).after == std::vector<uint32_t>{0});
  CHECK(framing({reference_tokenizer("sentencepiece/tokenizer.model.v1.model"), "", "", "none"}).before ==
        std::vector<uint32_t>{2});
}

TEST_CASE("special-token text inside a document is ordinary text, non-special added tokens match",
          "[data][tokenizer]") {
  auto llama3 = make_tokenizer({reference_tokenizer("llama3")});
  const auto ids = encode(*llama3, "<|begin_of_text|>hello<|end_of_text|>");
  CHECK(ids.size() > 4);
  for (uint32_t id : ids) CHECK(id < 130000);  // none of the special ids (added after the 130k base vocabulary)
  auto qwen = make_tokenizer({reference_tokenizer("qwen2")});
  const auto q = encode(*qwen, "a<tool_call>b");
  CHECK(std::count(q.begin(), q.end(), static_cast<uint32_t>(qwen->vocab_size() - 3)) == 1);
}

TEST_CASE("bad tokenizer files are data errors naming the file and the component", "[data][tokenizer]") {
  TempDir dir;
  auto err = [](const TokenizerSpec& s) { return exit2_error_of([&] { make_tokenizer(s); }); };
  const nlohmann::json wordy = read_json(reference_tokenizer("wordy") + "/tokenizer.json");
  auto with = [&](const std::string& name, auto&& edit) {
    nlohmann::json j = wordy;
    edit(j);
    write_file(dir.file(name), j.dump());
    return dir.file(name);
  };
  const std::string scripts = with("scripts.json", [](auto& j) {
    j["pre_tokenizer"]["pretokenizers"][1] = {{"type", "UnicodeScripts"}};
  });
  CHECK_THAT(err({scripts}), Contains("tokenizer.json '" + scripts +
                                      "' pre_tokenizer.pretokenizers[1] (UnicodeScripts) is not a pre-tokenizer "
                                      "gputrain implements (it implements ByteLevel, Split"));
  const std::string precompiled = with("precompiled.json", [](auto& j) {
    j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", ""}};
  });
  CHECK_THAT(err({precompiled}), Contains("normalizer (Precompiled) is not a normalizer gputrain implements"));
  const std::string wordpiece = with("wordpiece.json", [](auto& j) { j["model"]["type"] = "WordPiece"; });
  CHECK_THAT(err({wordpiece}), Contains("model (WordPiece) is not a model gputrain implements (it implements BPE"));
  const std::string regex = with("regex.json", [](auto& j) {
    j["pre_tokenizer"]["pretokenizers"][3] = {
        {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}, {"invert", false}};
  });
  CHECK_THAT(err({regex}), Contains("the regular expression (unclosed does not compile"));
  const std::string merge = with("merge.json", [](auto& j) { j["model"]["merges"][5] = "zz qq"; });
  CHECK_THAT(err({merge}),
             Contains("model (BPE).merges[5] (\"zz qq\") uses or makes a token that is not in the vocabulary"));
  write_file(dir.file("broken.json"), "{\"model\": ");
  CHECK_THAT(err({dir.file("broken.json")}),
             Contains("tokenizer.json '" + dir.file("broken.json") + "' is not valid JSON"));
  write_file(dir.file("corrupt.model"), std::string(1000, '\x07'));
  CHECK_THAT(err({dir.file("corrupt.model")}),
             Contains("'" + dir.file("corrupt.model") + "' is not a SentencePiece model"));
  fs::create_directories(dir.file("empty_model"));
  CHECK_THAT(err({dir.file("empty_model")}), Contains("holds neither tokenizer.json nor tokenizer.model"));
  CHECK_THAT(
      err({reference_tokenizer("mistral"), "", "", "", "<|nope|>"}),
      Contains("the eos token \"<|nope|>\" (from tokenizer_config.json or --eos-token) is not in its vocabulary"));
  const std::string no_eos = with("no_eos.json", [](auto& j) { j["post_processor"] = nullptr; });
  CHECK_THAT(err({no_eos}),
             Contains("names no end-of-text token, so documents cannot be separated\n    fix: pass --eos-token"));
  CHECK_THAT(err({dir.file("missing.json")}), Contains("unknown tokenizer"));
}
