#include "data/preference_rows.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace gputrain {

namespace {

using nlohmann::json;

// A list of {role, content} checked as a chat row's messages are (data/chat_format.h).
std::vector<ChatMessage> turns_of(const json& list, const std::string& key) {
  if (!list.is_array() || list.empty()) throw data_error("\"" + key + "\" is an empty list of turns");
  try {
    // parse_chat_row wants an assistant turn somewhere; the order of turns is checked here
    // (check_turns), so check the list as a row with one added and take it off again.
    json row = {{"messages", list}};
    row["messages"].push_back({{"role", "assistant"}, {"content", ""}});
    std::vector<ChatMessage> turns = parse_chat_row(row.dump());
    turns.pop_back();
    return turns;
  } catch (const Error& e) {
    throw data_error("\"" + key + "\": " + e.what());
  }
}

std::string text_of(const json& v, const std::string& key) {
  if (!v.is_string()) throw data_error("\"" + key + "\" is " + std::string(v.type_name()) + ", not a string");
  return v.get<std::string>();
}

// TRL's extract_prompt: the longest shared start of two sequences (turns, or characters, then
// without the space that ends it).
template <class Seq>
size_t shared_start(const Seq& a, const Seq& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

bool same_turn(const ChatMessage& a, const ChatMessage& b) { return a.role == b.role && a.content == b.content; }

void split_implicit(PreferenceRow& r, std::vector<ChatMessage> chosen, std::vector<ChatMessage> rejected) {
  size_t i = 0;
  while (i < chosen.size() && i < rejected.size() && same_turn(chosen[i], rejected[i])) ++i;
  if (i == 0) throw data_error("\"chosen\" and \"rejected\" share no first turn, so there is no prompt");
  r.prompt_turns.assign(chosen.begin(), chosen.begin() + static_cast<std::ptrdiff_t>(i));
  r.chosen_turns.assign(chosen.begin() + static_cast<std::ptrdiff_t>(i), chosen.end());
  r.rejected_turns.assign(rejected.begin() + static_cast<std::ptrdiff_t>(i), rejected.end());
}

void check_turns(const PreferenceRow& r) {
  if (r.prompt_turns.empty()) throw data_error("the prompt has no turns");
  if (r.prompt_turns.back().role != "user")
    throw data_error("the prompt's last turn is the " + r.prompt_turns.back().role +
                     "'s; it must be the user's, which the completions answer");
  for (const auto* side : {&r.chosen_turns, &r.rejected_turns}) {
    const char* name = side == &r.chosen_turns ? "chosen" : "rejected";
    if (side->empty()) throw data_error(std::string("the ") + name + " completion is empty (no turn after the prompt)");
    if (side->front().role != "assistant")
      throw data_error(std::string("the ") + name + " completion starts with the " + side->front().role +
                       "'s turn; it must start with the assistant's");
    for (const auto& t : *side)
      if (t.role == "system") throw data_error(std::string("the ") + name + " completion holds a system turn");
  }
}

}  // namespace

PreferenceRow parse_preference_row(std::string_view json_line) {
  json j;
  try {
    j = json::parse(json_line);
  } catch (const json::exception& e) {
    throw data_error(std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw data_error("expected a JSON object, got " + std::string(j.type_name()));
  for (const char* key : {"chosen", "rejected"})
    if (!j.contains(key)) throw data_error(std::string("has no \"") + key + "\"");
  PreferenceRow r;
  r.conversational = j["chosen"].is_array();
  if (j["rejected"].is_array() != r.conversational)
    throw data_error("\"chosen\" and \"rejected\" are not both strings or both lists of turns");
  const bool explicit_prompt = j.contains("prompt") && !(j["prompt"].is_string() && r.conversational);
  if (r.conversational) {
    std::vector<ChatMessage> chosen = turns_of(j["chosen"], "chosen"), rejected = turns_of(j["rejected"], "rejected");
    if (explicit_prompt) {
      r.prompt_turns = turns_of(j["prompt"], "prompt");
      r.chosen_turns = std::move(chosen), r.rejected_turns = std::move(rejected);
    } else {
      split_implicit(r, std::move(chosen), std::move(rejected));
    }
    check_turns(r);
    return r;
  }
  r.chosen = text_of(j["chosen"], "chosen"), r.rejected = text_of(j["rejected"], "rejected");
  if (explicit_prompt) {
    r.prompt = text_of(j["prompt"], "prompt");
  } else {
    size_t i = shared_start(r.chosen, r.rejected);
    if (i > 0 && i < r.chosen.size() && r.chosen[i - 1] == ' ') --i;  // the prompt without its last space
    r.prompt = r.chosen.substr(0, i);
    r.chosen.erase(0, i), r.rejected.erase(0, i);
  }
  if (r.chosen.empty() || r.rejected.empty())
    throw data_error(std::string("the ") + (r.chosen.empty() ? "chosen" : "rejected") + " completion is empty");
  return r;
}

PreferenceEncoder::PreferenceEncoder(const Tokenizer& tokenizer, std::optional<ChatTemplate> chat,
                                     std::string chat_date)
    : tokenizer_(tokenizer), enc_(tokenizer.make_encoder()), chat_(chat), chat_date_(std::move(chat_date)) {}

// BOS-framed tokenizers (Llama, Mistral) add BOS before a text, as Hugging Face's do with special
// tokens on; the others (GPT-2, Qwen2) add nothing.
static bool adds_bos(const DocumentFraming& f) { return !f.after.empty(); }
static uint32_t eos_id(const Tokenizer& t) {
  const DocumentFraming& f = t.framing();
  return static_cast<uint32_t>(f.eos >= 0 ? f.eos : t.document_start_id());
}

std::vector<uint32_t> PreferenceEncoder::text_ids(const std::string& text, bool close) {
  const DocumentFraming& f = tokenizer_.framing();
  std::vector<uint32_t> ids;
  if (adds_bos(f)) ids = f.before;
  enc_->encode(text, ids);
  if (close) ids.push_back(eos_id(tokenizer_));
  return ids;
}

std::vector<uint32_t> PreferenceEncoder::conversation_ids(const std::vector<ChatMessage>& turns, size_t prompt_turns,
                                                          size_t& start) {
  auto is_special = [&](const std::string& s) { return tokenizer_.special_id(s).has_value(); };
  const std::vector<ChatPiece> pieces =
      render_chat(*chat_, turns, is_special, chat_date_.empty() ? kLlama31DefaultDate : chat_date_);
  size_t assistant_before = 0;  // the prompt's own assistant turns: one trained run of pieces each
  for (size_t i = 0; i < prompt_turns; ++i) assistant_before += turns[i].role == "assistant";
  const DocumentFraming& f = tokenizer_.framing();
  std::vector<uint32_t> ids;
  if (adds_bos(f)) ids = f.before;
  size_t runs = 0;
  bool in_run = false;
  start = std::string::npos;
  for (const ChatPiece& p : pieces) {
    if (p.trained && !in_run && runs++ == assistant_before) start = ids.size();
    in_run = p.trained;
    if (p.kind == ChatPiece::Kind::kText) {
      enc_->encode_continuation(p.text, ids);
    } else if (p.kind == ChatPiece::Kind::kEndOfText) {
      ids.push_back(eos_id(tokenizer_));
    } else if (auto id = tokenizer_.special_id(p.text)) {
      ids.push_back(*id);
    } else {
      throw data_error("the " + std::string(chat_template_name(*chat_)) + " chat template needs the special token " +
                       p.text + ", which tokenizer " + tokenizer_.name() + " does not have");
    }
  }
  if (start == std::string::npos) throw data_error("the completion renders to no trained token");
  return ids;
}

PreferenceIds PreferenceEncoder::encode(const PreferenceRow& row) {
  PreferenceIds out;
  if (row.conversational) {
    if (!chat_) throw data_error("the row is a conversation, and no chat template is chosen");
    auto whole = [&](const std::vector<ChatMessage>& completion, std::vector<uint32_t>& prompt) {
      std::vector<ChatMessage> turns = row.prompt_turns;
      turns.insert(turns.end(), completion.begin(), completion.end());
      size_t start = 0;
      std::vector<uint32_t> ids = conversation_ids(turns, row.prompt_turns.size(), start);
      prompt.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(start));
      return std::vector<uint32_t>(ids.begin() + static_cast<std::ptrdiff_t>(start), ids.end());
    };
    std::vector<uint32_t> prompt_r;
    out.chosen = whole(row.chosen_turns, out.prompt);
    out.rejected = whole(row.rejected_turns, prompt_r);
    if (prompt_r != out.prompt) throw data_error("the prompt renders differently before the two completions");
    return out;
  }
  // As TRL: the prompt ends where the prompt's ids and prompt + completion's part (tokens can merge
  // across the boundary).
  const std::vector<uint32_t> prompt = text_ids(row.prompt, false);
  const std::vector<uint32_t> chosen = text_ids(row.prompt + row.chosen, true);
  const std::vector<uint32_t> rejected = text_ids(row.prompt + row.rejected, true);
  const size_t p = std::min(shared_start(prompt, chosen), shared_start(prompt, rejected));
  out.prompt.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(p));
  out.chosen.assign(chosen.begin() + static_cast<std::ptrdiff_t>(p), chosen.end());
  out.rejected.assign(rejected.begin() + static_cast<std::ptrdiff_t>(p), rejected.end());
  return out;
}

bool truncate_pair(PreferenceIds& ids, int64_t max_length, int64_t max_prompt_length) {
  if (max_prompt_length > 0 && static_cast<int64_t>(ids.prompt.size()) > max_prompt_length)
    ids.prompt.erase(ids.prompt.begin(), ids.prompt.end() - max_prompt_length);
  if (max_length <= 0) return true;
  const auto prompt = static_cast<int64_t>(ids.prompt.size());
  if (prompt >= max_length) return false;
  for (auto* c : {&ids.chosen, &ids.rejected})
    if (static_cast<int64_t>(c->size()) > max_length - prompt) c->resize(static_cast<size_t>(max_length - prompt));
  return true;
}

}  // namespace gputrain
