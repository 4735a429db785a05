// Texts that stress tokenizers: scripts and languages, code, digits, white
// space runs, CRLF, emoji sequences, look-alikes of special tokens, and
// random strings over the awkward characters.
#pragma once
#include <random>
#include <string>
#include <vector>

namespace gputrain::test {

// Tokenizer-file cases on top of varied_text(): text that spells other
// families' special tokens and pieces, normalization-sensitive text, long
// runs, and bytes that are not UTF-8 (compared after U+FFFD replacement).
inline std::vector<std::string> tokenizer_file_text();

inline std::vector<std::string> varied_text() {
  std::vector<std::string> s = {
      "Hello world! It's a test: don't, won't, they're, we've, I'm, you'll, he'd.",
      "DON'T SHOUT'S 'quoted' ''s '' 's 'S x'll've'd",
      "Numbers 123 4567.89 1,000,000 \u00bc \u00bd \u0663\u0664\u0665 \u3007 \u216b \u2460\u2461",
      "   leading spaces\n\n\n  multiple\t\ttabs \r\n windows\r\nline   \n",
      "trailing spaces   ",
      "na\u00efve caf\u00e9 r\u00e9sum\u00e9 \u2014 \u201cquotes\u201d \u2018single\u2019 \u2026 \u00a9\u00ae\u2122",
      "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5\uff0c\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\ud55c\uad6d"
      "\uc5b4!",
      "Emoji \U0001F600\U0001F44D\U0001F3FD \U0001F468\u200D\U0001F469\u200D\U0001F467 flags \U0001F1E9\U0001F1EA",
      "Greek \u03b1\u03b2\u03b3 \u0394, Cyrillic \u041f\u0440\u0438\u0432\u0435\u0442, Arabic "
      "\u0645\u0631\u062d\u0628\u0627, Hindi \u0928\u092e\u0938\u094d\u0924\u0947",
      "mixed123abc abc123 12abc 3.14e-10 0x1F",
      "\u00a0nbsp\u2009thin\u3000ideo\u2028line\u2029para\u0085nel",
      "control \x1c\x1d\x1e\x1f chars \x0b\x0c end",
      "zero width \u200b\u200c\u200d joiners \ufeff bom, combining e\u0301 a\u0308",
      "<|endoftext|> is plain text here",
      "  \n  \n",
      " ",
      "\n",
      "a",
      "'",
      "'s",
      " 's",
      "$$$ %%% ^^^ &&& *** ((( ))) --- +++ === ||| \\\\ /// ??? !!!",
      "https://example.com/path?query=1&b=2#frag user@mail.org",
      "def f(x):\n    return x ** 2  # comment\n\n\tif x:\n\t\tpass\n",
      "\U0001D518\U0001D52B\U0001D526 math \U0001D7D9\U0001D7DA \u2115\u2124",
  };
  // Random strings over an alphabet of the awkward cases.
  const std::vector<std::string> alphabet = {"a",      "b",      " ", "'", "s",      "d",      "\n",
                                             "\t",     "1",      ".", ",", "\u00e9", "\u4e2d", "\U0001F600",
                                             "\u00a0", "\u3000", "-", "_", "ll",     "re"};
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) t += alphabet[rng() % alphabet.size()];
    s.push_back(t);
  }
  return s;
}

inline std::vector<std::string> tokenizer_file_text() {
  std::vector<std::string> s = varied_text();
  const std::vector<std::string> more = {
      "<|begin_of_text|>Hi<|end_of_text|> <s>[INST] x [/INST]</s> <|im_start|>user\n<|im_end|> <bos><eos>",
      "<tool_call>{\"name\": \"f\"}</tool_call> and <tool_call>again",
      "literal pieces \u2581word \u2581\u2581 <0x41> <0x0A> ##ing \u0120the \u010a",
      "line one\r\nline two\r\n\r\n\tindented\r\n",
      "e\u0301 vs \u00e9, \ufb01ne \uff21\uff22\uff23 \u2167 \u00bd \u0130stanbul \u03a3\u039f\u03a3",
      "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u05e2\u05d1\u05e8\u05d9\u05ea "
      "\u0939\u093f\u0928\u094d\u0926\u0940 \u1010\u102d\u102f\u1000\u103a",
      "1234567890 12 345 6789 3.14159 -42 1e10 0xDEADBEEF \u0661\u0662\u0663",
      "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];  // dot\n}\n",
      "def f(x):\n\treturn {'a': [1, 2], \"b\": None}\n\n\n",
      std::string(300, ' ') + "x" + std::string(70, '\n') + "y",
      "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 \U0001F3F3\uFE0F\u200D\U0001F308 "
      "\U0001F44B\U0001F3FF \U0001F1EF\U0001F1F5",
      "bad \xff\xfe bytes \xc3( \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end\xe2",
      "\xf0\x9f\x98",
      "UPPER lower MiXeD \u00c9COLE \u00df \u1e9e",
      "",
  };
  s.insert(s.end(), more.begin(), more.end());
  return s;
}

}  // namespace gputrain::test
