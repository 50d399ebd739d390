// Small templates, one or a few Jinja constructs each, rendered by our engine
// and by Python's Jinja2 (Hugging Face's environment) over the same inputs:
// byte-for-byte equal, or both failing (raise_exception: same message).
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "gtest/gtest.h"
#include "tests/chat/reference_harness.h"

namespace ced {
namespace {

const char* const kTemplates[] = {
    // Output, literals, whitespace control, trim_blocks / lstrip_blocks.
    "plain text\n",
    "a\r\nb\rc\n\n",
    "{{ 'single' }}{{ \"double\" }}{{ 'esc\\n\\t\\\\\\'\\x41\\u00e9\\101\\q' }}{{ 'adj' 'acent' }}",
    "{{ 1 }} {{ -2 }} {{ 1.5 }} {{ 1e3 }} {{ 1_000 }} {{ 2.0 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.1 + 0.2 "
    "}}",
    "{{ true }} {{ false }} {{ none }} {{ True }} {{ None }} {{ [1, 'a', none, [true]] }}",
    "{{ {'a': 1, 'b': [2.5, 'x'], 'c': {}} }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ \"it's\" }}",
    "  {% if true %}\n  yes\n  {% endif %}\n  after\n",
    "x  {%- if true -%}  \n  y  {%- endif -%}\n  z",
    "line\n    {# comment #}\n  {#- stripped -#}  \nend",
    "{% if true +%}\nkept newline{% endif %}\n  {%+ if true %}kept indent{% endif %}",
    "{{ 'a' -}}\n\n   {{- 'b' }}\n{{ 'c' }}\n",
    "{% raw %}{{ not rendered }} {% if %}{% endraw %}\n{% raw -%}  x  {%- endraw %}",
    "\t{% for m in messages %}\n\t{{ m.role }}\n\t{% endfor %}\n",
    // Names, attributes, subscripts, slices, undefined.
    "{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages[-1].role }} {{ "
    "messages.0.role }}",
    "{{ messages[99] }}|{{ messages[0].nope }}|{{ nothing }}|{{ messages[0].nope is defined }}",
    "{{ nothing is defined }} {{ nothing is undefined }} {{ nothing | length }} {{ nothing ~ 'x' "
    "}}",
    "{% for x in nothing %}never{% else %}empty loop{% endfor %}",
    "{{ nothing.attr }}",
    "{{ nothing + 1 }}",
    "{{ messages[::-1] | map(attribute='role') | join(',') }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] "
    "}}",
    "{{ [1,2,3,4,5][1:] }} {{ [1,2,3,4,5][:-2] }} {{ [1,2,3,4,5][::2] }} {{ [1,2,3][-1] }} {{ "
    "'héllo'[1] }}",
    "{{ none.attr }}|{{ none['x'] }}|{{ 'abc'.nope }}",
    // Operators.
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} "
    "{{ 7.5 // 2 }} {{ -7.5 % 2 }}",
    "{{ 'ab' * 3 }} {{ 3 * [1] }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none ~ true }} {{ 1 + true }} {{ 1 "
    "+ 2.5 }}",
    "{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < "
    "[1, 3] }} {{ 2 >= 2 }}",
    "{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'cat' }} {{ not 1 in "
    "[2] }}",
    "{{ 1 and 'x' }} {{ 0 or 'y' }} {{ none or [] }} {{ not none }} {{ 'a' if true else 'b' }} {{ "
    "'a' if false }}.",
    "{{ 1 + 'a' }}",
    "{{ 'a' < 1 }}",
    "{{ 1 / 0 }}",
    "{{ -'a' }}",
    // Tests.
    "{{ none is none }} {{ 1 is not none }} {{ 'x' is string }} {{ 1 is number }} {{ 1.0 is float "
    "}} {{ 1 is integer }} {{ true is boolean }}",
    "{{ {} is mapping }} {{ [] is iterable }} {{ 'x' is iterable }} {{ 1 is iterable }} {{ [] is "
    "sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }}",
    "{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 2 is gt 1 }} {{ 'a' is in 'abc' }} {{ true is true }} "
    "{{ false is false }} {{ none is sameas none }} {{ 'ABC' is upper }}",
    // Filters.
    "{{ '  x  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ messages | length }}|{{ 'héllo' | length "
    "}}|{{ {'a': 1} | count }}",
    "{{ none | string }}|{{ 1.5 | string }}|{{ [1] | string }}|{{ nothing | default('d') }}|{{ '' "
    "| default('e', true) }}|{{ none | d('n') }}",
    "{{ [3, 1, 2] | first }} {{ [3, 1, 2] | last }} {{ [] | first }}. {{ 'abc' | first }} {{ 'Hi' "
    "| lower }} {{ 'Hi' | upper }} {{ 'hello world' | title }} {{ 'hELLO' | capitalize }}",
    "{{ 'a-b-c' | replace('-', '+') }} {{ 'a-b-c' | replace('-', '', 1) }} {{ [1, 2] | join }} {{ "
    "['a', 'b'] | join(', ') }} {{ [1, 2] | reverse | list }} {{ 'abc' | reverse }}",
    "{% for k, v in {'b': 1, 'a': [2]} | items %}{{ k }}={{ v }};{% endfor %}{% for k, v in {'z': "
    "0}.items() %}{{ k }}{{ v }}{% endfor %}",
    "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ "
    "messages | rejectattr('role', 'eq', 'user') | list | length }}",
    "{{ [0, 1, 2, none] | select | list }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3] "
    "| reject('even') | list }} {{ ['A', 'b'] | map('lower') | list }}",
    "{{ messages | map(attribute='nope') | list }} {{ messages | map(attribute='nope', "
    "default='x') | list }}",
    "{{ -3 | abs }} {{ '42' | int }} {{ 'x' | int }} {{ '4.5' | float }} {{ 3.7 | int }} {{ [1, 1, "
    "'a', 'A'] | unique | list }} {{ '<a&\"b\\'>' | e }}",
    "{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ 'x' | safe }}",
    "{{ tools | tojson }}",
    "{{ tools | tojson(indent=2) }}",
    "{{ tools[0] | tojson(indent=4, sort_keys=true) }}",
    "{{ tools[0] | tojson(separators=(',', ':')) }} {{ 'é\u2028\"' | tojson }} {{ 'é' | "
    "tojson(ensure_ascii=true) }}",
    "{{ {'n': none, 'f': 1.0, 'i': -1, 'b': false, 'l': [[]], 's': 'q\\\\\"\\t\\u0001'} | tojson "
    "}}",
    "{{ nothing | tojson }}",
    // String methods.
    "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'a,b,,c'.split(',') }} "
    "{{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }}",
    "[{{ '\n x \n'.strip() }}][{{ 'xxhixx'.strip('x') }}][{{ '\n\nx'.lstrip('\n') }}][{{ 'x  "
    "'.rstrip() }}][{{ 'aXa'.replace('a', 'b') }}][{{ 'Hi'.lower() }}{{ 'Hi'.upper() }}]",
    "{{ 'a</think>b</think>c'.split('</think>')[-1] }} {{ 'abc'.find('c') }} {{ 'abca'.count('a') "
    "}} {{ '-'.join(['x', 'y']) }} {{ 'ab cd'.title() }} {{ '12'.isdigit() }}",
    "{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b') }} {{ {'a': 1}.get('b', 2) }} {{ {'a': 1}.keys() "
    "| list }} {{ {'a': 1}.values() | list }}",
    "{{ 'x'.nomethod() }}",
    // Statements.
    "{% if false %}a{% elif none %}b{% elif 1 %}c{% else %}d{% endif %}{% if not messages %}e{% "
    "else %}f{% endif %}",
    "{% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ "
    "loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}|{% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}:{{ m.role }} "
    "{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% "
    "endif %}{{ i }}{% endfor %}",
    "{% for i in range(3) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{% endfor %};{% endfor "
    "%}{{ range(2, 8, 3) | list }}",
    "{% for c in 'héy' %}[{{ c }}]{% endfor %}{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}{% "
    "for a, b in [[1, 2], (3, 4)] %}{{ a }}{{ b }}{% endfor %}",
    "{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}>{{ "
    "loop.nextitem.role if loop.nextitem is defined else '-' }} {{ loop.cycle('odd', 'even') }} {% "
    "endfor %}",
    "{% set x = 1 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i * 10 %}[{{ x }}]{% endfor %}{{ x "
    "}}{% if true %}{% set y = 3 %}{% endif %}{{ y }}",
    "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% "
    "set ns.found = true %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n "
    "}}",
    "{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t }}{% set block %}inside {{ a "
    "}}{% endset %}[{{ block }}]",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ "
    "greet('Bob', punct='?') }} {{ greet('C', '.') }}",
    "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}",
    "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% "
    "endif %}ok",
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}",
    "{% set x = 5 %}{% set ns = namespace(v=x) %}{% set ns.v = ns.v * 2 %}{{ ns.v }} {{ dict(a=1, "
    "b='x') }} {{ namespace(a=1).a }}",
    "{{ messages[0].content if messages[0].content is string else 'not a string' }}{{ 'q' if "
    "add_generation_prompt }}{{ bos_token }}{{ eos_token }}",
    "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}{{ c.id }}:{{ "
    "c.function.name }}({{ c.function.arguments }}) {% endfor %}{% endif %}{% if m.tool_call_id is "
    "defined %}<{{ m.tool_call_id }}>{% endif %}{% endfor %}",
};

ChatMessage Msg(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

TEST(JinjaConstructsReferenceTest, SmallTemplatesMatchJinja2) {
  if (!testing::PythonJinjaAvailable()) {
    CED_SKIP_OR_FAIL_WHEN_MISSING("/usr/bin/python3 with jinja2");
  }
  ChatMessage call = Msg("assistant", "");
  call.tool_calls.push_back(ChatToolCall{"id1", "function", "lookup", "{\"q\": \"é\"}"});
  ChatMessage result = Msg("tool", "found");
  result.tool_call_id = "id1";
  const std::vector<std::vector<ChatMessage>> conversations = {
      {Msg("system", "Sys"), Msg("user", "Hello"), Msg("assistant", "Hi!"), Msg("user", "Bye ü")},
      {Msg("user", "only"), call, result},
  };
  ChatRenderOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  options.tools_json = {
      R"({"name": "lookup", "parameters": {"q": {"type": "string", "enum": ["a", "ü"]}, "n": 1.25}})",
      R"({"name": "none", "parameters": {}})"};
  std::vector<testing::RenderCase> cases;
  int index = 0;
  for (const char* source : kTemplates) {
    for (size_t conv = 0; conv < conversations.size(); ++conv) {
      testing::RenderCase c;
      c.label = "template #" + std::to_string(index) + " conversation " + std::to_string(conv) +
                ": " + source;
      c.template_source = source;
      c.messages = conversations[conv];
      c.options = options;
      c.options.add_generation_prompt = conv == 0;
      cases.push_back(std::move(c));
    }
    ++index;
  }
  testing::ExpectSameAsJinja2(cases);
}

}  // namespace
}  // namespace ced
