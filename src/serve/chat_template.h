// Chat templates: the Jinja subset Hugging Face chat templates are written in (Debian has no
// C++ Jinja library), rendered the way transformers' apply_chat_template renders them
// (trim_blocks and lstrip_blocks on).
//
// Supported: {{ expr }}, {% if %}/{% elif %}/{% else %}/{% endif %}, {% for x in xs %} (also
// `for k, v in d.items()`, an `if` filter after the sequence, {% else %} for an empty one) with
// loop.index/index0/first/last/length, {% set x = expr %} and {% set ns.x = expr %} over
// namespace(), {# comments #}, whitespace control ({%- -%}, {{- -}}); expressions with
// literals, [lists], {dicts}, attribute and item access, slices, ~ + - * / % and comparisons,
// `and or not in is`, `a if c else b`, tests (defined, none, string, number, mapping,
// sequence, iterable, true, false), the filters trim, upper, lower, length/count, tojson,
// string, first, last, join, default, and the string methods strip, lstrip, rstrip, upper,
// lower, startswith, endswith, split, replace, plus dict get/items/keys/values;
// raise_exception(msg) is an ApiError 400. Anything else is an ApiError naming what is not
// supported, raised when the template is compiled (at start-up), not per request.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "serve/request.h"

namespace alk::serve {

class ChatTemplate {
 public:
  // Throws ApiError(500, "template_error", ...) when the text is not in the subset.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // messages as [{role, content}], the special tokens' texts, and add_generation_prompt.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token) const;

  struct Node;

 private:
  std::shared_ptr<const Node> root_;
};

// What alk uses when tokenizer_config.json has no chat_template (documented in README.md):
// each message as "<role>: <content>\n\n" and, with add_generation_prompt, "assistant:".
const char* plain_chat_template();

}  // namespace alk::serve
