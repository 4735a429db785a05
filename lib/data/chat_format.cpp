#include "data/chat_format.h"

#include <nlohmann/json.hpp>

#include "data/unicode_properties.h"
#include "util/error.h"

namespace gputrain {
namespace {

// What Qwen2.5's template writes as the system message of a conversation that has none.
constexpr const char* kQwen25DefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// Jinja's trim, as Meta's Llama 3 template applies it to every message: Python's str.strip(), whose
// whitespace is Unicode's White_Space and the separators U+001C..U+001F. `s` is valid UTF-8 (from JSON).
std::string trimmed(const std::string& s) {
  auto space = [](char32_t c) { return is_white_space(c) || (c >= 0x1c && c <= 0x1f); };
  size_t begin = 0, end = s.size(), len = 0, start = 0;
  while (begin < end && space(next_code_point(s, begin, len))) begin += len;
  while (end > begin && space(code_point_before(s, end, start))) end = start;
  return s.substr(begin, end - begin);
}

struct NamedTemplate {
  const char* name;
  ChatTemplate t;
};
constexpr NamedTemplate kTemplates[] = {
    {"chatml", ChatTemplate::kChatml},   {"qwen2.5", ChatTemplate::kQwen25},
    {"llama3", ChatTemplate::kLlama3},   {"llama3.1", ChatTemplate::kLlama31},
    {"mistral", ChatTemplate::kMistral}, {"mistral-v0.3", ChatTemplate::kMistralV03},
    {"plain", ChatTemplate::kPlain}};

// Mistral's templates (and mistral_common) take user, assistant, user, ... after the optional system
// message, and refuse a conversation that does not alternate.
void require_alternating(const std::vector<ChatMessage>& messages, const char* tmpl) {
  auto a_turn = [](const std::string& role) { return (role == "assistant" ? "an " : "a ") + role + " turn"; };
  size_t turn = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "system") continue;
    const std::string want = turn++ % 2 == 0 ? "user" : "assistant";
    if (messages[i].role != want)
      throw data_error("messages[" + std::to_string(i) + "] is " + a_turn(messages[i].role) + " where the " + tmpl +
                       " template needs " + a_turn(want) + " (user and assistant turns alternate)");
  }
}

}  // namespace

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& n : kTemplates) v.emplace_back(n.name);
    return v;
  }();
  return names;
}

ChatTemplate chat_template_named(const std::string& name) {
  for (const auto& n : kTemplates)
    if (name == n.name) return n.t;
  std::string all;
  for (const auto& n : kTemplates) all += std::string(all.empty() ? "" : ", ") + n.name;
  throw usage_error("unknown chat template '" + name + "'\n    fix: use one of " + all);
}

const char* chat_template_name(ChatTemplate t) {
  for (const auto& n : kTemplates)
    if (n.t == t) return n.name;
  return "plain";
}

std::vector<ChatMessage> parse_chat_row(std::string_view line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw data_error(std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw data_error("expected a JSON object, got " + std::string(j.type_name()));
  std::vector<ChatMessage> out;
  if (j.contains("messages")) {
    const auto& m = j["messages"];
    if (!m.is_array() || m.empty()) throw data_error("\"messages\" is not a non-empty list");
    for (size_t i = 0; i < m.size(); ++i) {
      const auto& msg = m[i];
      const std::string at = "messages[" + std::to_string(i) + "]";
      if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string() || !msg.contains("content") ||
          !msg["content"].is_string())
        throw data_error(at + " is not {\"role\": \"...\", \"content\": \"...\"}");
      const std::string role = msg["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant")
        throw data_error(at + " has the unknown role '" + role + "' (roles: system, user, assistant)");
      if (role == "system" && i != 0) throw data_error(at + " is a system message after the first message");
      out.push_back({role, msg["content"].get<std::string>()});
    }
  } else if (j.contains("prompt") || j.contains("completion")) {
    if (!j.value("prompt", nlohmann::json()).is_string() || !j.value("completion", nlohmann::json()).is_string())
      throw data_error("\"prompt\" and \"completion\" must both be strings");
    out.push_back({"user", j["prompt"].get<std::string>()});
    out.push_back({"assistant", j["completion"].get<std::string>()});
  } else {
    throw data_error("has neither \"messages\" nor \"prompt\"/\"completion\"");
  }
  bool assistant = false;
  for (const auto& m : out) assistant = assistant || m.role == "assistant";
  if (!assistant) throw data_error("has no assistant turn, so nothing in it would take loss");
  return out;
}

ChatTemplate default_chat_template(const std::function<bool(const std::string&)>& is_special) {
  if (is_special("<|start_header_id|>"))
    return is_special("<|eom_id|>") ? ChatTemplate::kLlama31 : ChatTemplate::kLlama3;
  if (is_special("<|im_start|>")) return ChatTemplate::kChatml;
  if (is_special("[INST]")) return ChatTemplate::kMistralV03;
  return ChatTemplate::kPlain;
}

std::vector<ChatPiece> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages,
                                   const std::function<bool(const std::string&)>& is_special,
                                   const std::string& today) {
  using Kind = ChatPiece::Kind;
  std::vector<ChatPiece> p;
  auto text = [&](std::string s, bool trained = false) {
    if (!s.empty()) p.push_back({Kind::kText, std::move(s), trained});
  };
  auto special = [&](std::string s, bool trained = false) { p.push_back({Kind::kSpecial, std::move(s), trained}); };
  auto end_of_text = [&] { p.push_back({Kind::kEndOfText, "", true}); };
  auto llama3_turns = [&](size_t from) {
    for (size_t i = from; i < messages.size(); ++i) {
      const bool a = messages[i].role == "assistant";
      special("<|start_header_id|>");
      text(messages[i].role);
      special("<|end_header_id|>");
      text("\n\n");
      text(trimmed(messages[i].content), a);
      special("<|eot_id|>", a);
    }
  };
  switch (t) {
    case ChatTemplate::kQwen25:  // ChatML; without a system message of its own, Qwen2.5's default one
      if (messages.front().role != "system") {
        special("<|im_start|>");
        text("system\n" + std::string(kQwen25DefaultSystem));
        special("<|im_end|>");
        text("\n");
      }
      [[fallthrough]];
    case ChatTemplate::kChatml:  // <|im_start|>role\ncontent<|im_end|>\n
      for (const auto& m : messages) {
        const bool a = m.role == "assistant";
        special("<|im_start|>");
        text(m.role + "\n");
        text(m.content, a);
        special("<|im_end|>", a);
        text("\n");
      }
      break;
    case ChatTemplate::kLlama3:  // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>, content trimmed
      llama3_turns(0);
      break;
    case ChatTemplate::kLlama31: {  // Llama 3.1's: llama3's turns after a system block that is always there
      const bool system = messages.front().role == "system";
      special("<|start_header_id|>");
      text("system");
      special("<|end_header_id|>");
      text("\n\nCutting Knowledge Date: December 2023\nToday Date: " + today + "\n\n" +
           (system ? trimmed(messages.front().content) : ""));
      special("<|eot_id|>");
      llama3_turns(system ? 1 : 0);
      break;
    }
    case ChatTemplate::kMistral: {  // Mistral-7B-Instruct-v0.2's: " [INST] (system\n\n)user [/INST]" " assistant</s>"
      require_alternating(messages, "mistral");
      // One piece of text where the tokenizer has no [INST] token (what the template's string encodes to).
      const bool markers = is_special("[INST]");
      std::string system;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system = m.content + "\n\n";
        } else if (m.role == "user") {
          if (markers) {
            text(" ");
            special("[INST]");
            text(" " + system + m.content + " ");
            special("[/INST]");
          } else {
            text(" [INST] " + system + m.content + " [/INST]");
          }
          system.clear();
        } else {
          text(" " + m.content, true);
          end_of_text();
        }
      }
      break;
    }
    case ChatTemplate::kMistralV03: {  // mistral_common's v3: "[INST] user[/INST]" " assistant</s>"
      // The system message goes before the last user message, as Mistral's own tokenizer library writes
      // training and inference requests alike; [INST] and [/INST] are special tokens in this format.
      require_alternating(messages, "mistral-v0.3");
      std::string system;
      size_t last_user = 0;
      for (size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].role == "system" && !messages[i].content.empty()) system = messages[i].content + "\n\n";
        if (messages[i].role == "user") last_user = i;
      }
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user") {
          special("[INST]");
          std::string turn = " ";
          if (i == last_user) turn += system;
          text(turn + m.content);
          special("[/INST]");
        } else if (m.role == "assistant") {
          text(" " + m.content, true);
          end_of_text();
        }
      }
      break;
    }
    case ChatTemplate::kPlain:  // System: ...\nUser: ...\nAssistant: ...<eos>\n
      for (const auto& m : messages) {
        const bool a = m.role == "assistant";
        const std::string who = m.role == "system" ? "System" : m.role == "user" ? "User" : "Assistant";
        text(who + ": ");
        text(m.content, a);
        if (a) end_of_text();
        text("\n");
      }
      break;
  }
  return p;
}

}  // namespace gputrain
