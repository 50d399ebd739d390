// Unit tests of the Jinja engine: errors name the construct and line,
// undefined semantics, whitespace control, limits.
#include <string>

#include "absl/status/status.h"
#include "engine/chat/jinja_template.h"
#include "gtest/gtest.h"

namespace ced::jinja {
namespace {

absl::StatusOr<std::string> Render(const std::string& source, const ValueDict& context = {},
                                   const RenderLimits& limits = RenderLimits()) {
  absl::StatusOr<std::unique_ptr<Template>> t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return (*t)->Render(context, limits);
}

void ExpectParseError(const std::string& source, const std::string& substring) {
  absl::StatusOr<std::unique_ptr<Template>> t = Template::Parse(source);
  ASSERT_FALSE(t.ok()) << source;
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_NE(t.status().message().find(substring), std::string::npos)
      << "'" << t.status().message() << "' should contain '" << substring << "'";
}

TEST(JinjaParseTest, UnsupportedConstructsAreNamedWithTheirLine) {
  ExpectParseError("a\n{% include 'x.jinja' %}",
                   "line 2: unsupported construct: the 'include' tag");
  ExpectParseError("{% extends 'base' %}", "line 1: unsupported construct: the 'extends' tag");
  ExpectParseError("\n\n{% call f() %}{% endcall %}",
                   "line 3: unsupported construct: the 'call' tag");
  ExpectParseError("{% filter upper %}x{% endfilter %}", "the 'filter' tag");
  ExpectParseError("{% generation %}x{% endgeneration %}", "the 'generation' tag");
  ExpectParseError("x\n{{ a | wordwrap }}", "line 2: unsupported construct: the filter 'wordwrap'");
  ExpectParseError("{% if a is escaped %}{% endif %}",
                   "line 1: unsupported construct: the test 'escaped'");
  ExpectParseError("{{ f(*args) }}", "*args");
  ExpectParseError("{% for x in y recursive %}{% endfor %}", "recursive");
  ExpectParseError("{{ x[1, 2] }}", "several indexes");
  ExpectParseError("{% frobnicate %}", "unknown tag 'frobnicate'");
}

TEST(JinjaParseTest, SyntaxErrorsNameTheLine) {
  ExpectParseError("{% if x %}\nno end",
                   "line 2: unexpected end of template, expected 'elif' or 'else' or 'endif'");
  ExpectParseError("{{ 'unterminated }}", "line 1: unterminated string literal");
  ExpectParseError("a\nb {{ x ", "line 2: unterminated expression");
  ExpectParseError("{# never closed", "missing end of comment tag");
  ExpectParseError("{{ (1 + 2 }}", "line 1: unexpected '}'");
  ExpectParseError("{{ 1 ) }}", "unexpected ')'");
  ExpectParseError("{{ x ! y }}", "unexpected character '!'");
  ExpectParseError("{% endif %}", "unknown tag 'endif'");
  ExpectParseError("{% break %}", "'break' outside of a for loop");
  ExpectParseError("{% for x in y %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}",
                   "'continue' outside of a for loop");
  ExpectParseError("{{ }}", "unexpected '}}' in an expression");
  ExpectParseError("{{ 99999999999999999999 }}", "integer literal out of range");
}

TEST(JinjaParseTest, DeepNestingIsAnErrorNotACrash) {
  ExpectParseError("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}",
                   "nested too deeply");
  ExpectParseError("{{ " + std::string(5000, '-') + "1 }}", "nested too deeply");
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  ExpectParseError(nots + "x }}", "nested too deeply");
}

TEST(JinjaRenderTest, UndefinedSemantics) {
  EXPECT_EQ(*Render("[{{ x }}][{{ x | length }}][{{ x is defined }}][{{ x ~ 'a' }}]"),
            "[][0][False][a]");
  EXPECT_EQ(*Render("{% for i in x %}no{% else %}empty{% endfor %}{% if x %}no{% endif %}"),
            "empty");
  ValueDict ctx;
  ValueDict message;
  message.Set("role", Value::String("user"));
  ctx.Set("m", Value::Dict(message));
  EXPECT_EQ(*Render("[{{ m.content }}][{{ m['content'] is defined }}][{{ m.role }}]", ctx),
            "[][False][user]");
  EXPECT_EQ(*Render("{{ x | default('fallback') }}"), "fallback");
  // Attribute access, arithmetic and comparisons on undefined fail, naming the line.
  absl::StatusOr<std::string> r = Render("ok\n{{ x.y }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "line 2: 'x' is undefined");
  r = Render("{{ m.missing + 1 }}", ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "line 1: 'dict object' has no attribute 'missing'");
  EXPECT_FALSE(Render("{{ x < 1 }}").ok());
}

TEST(JinjaRenderTest, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before it.
  EXPECT_EQ(*Render("<\n  {% if true %}\n  x\n  {% endif %}\n>"), "<\n  x\n>");
  // {{ }} is not trimmed; - strips all whitespace on its side, + keeps it.
  EXPECT_EQ(*Render("{{ 'a' }}\n  {{ 'b' }}"), "a\n  b");
  EXPECT_EQ(*Render("a  \n {%- if true -%} \n b {%- endif %}"), "ab");
  EXPECT_EQ(*Render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  EXPECT_EQ(*Render("  {% if true %}x{% endif %}\ny"), "xy");
  EXPECT_EQ(*Render("a {# comment #}\nb"), "a b");
  // One trailing newline of the source is dropped; \r\n becomes \n.
  EXPECT_EQ(*Render("x\r\ny\n"), "x\ny");
}

TEST(JinjaRenderTest, RuntimeErrorsAreInvalidArgumentWithLine) {
  absl::StatusOr<std::string> r = Render("\n\n{{ 1 + 'a' }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "line 3: unsupported operand type(s) for +: 'int' and 'str'");
  r = Render("{{ [].append(1) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("list.append"), std::string::npos) << r.status();
  r = Render("{{ '%s' % 1 }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("string formatting"), std::string::npos) << r.status();
  // raise_exception's message comes back as is.
  r = Render("{{ raise_exception('bad roles') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "bad roles");
}

TEST(JinjaRenderTest, LimitsStopRunawayTemplates) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  absl::StatusOr<std::string> r =
      Render("{% for i in range(100) %}0123456789ABCDEF{% endfor %}", {}, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  r = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  limits = RenderLimits();
  limits.max_steps = 10000;
  r = Render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", {},
             limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(Render("{{ range(100000000) | length }}").ok());
  EXPECT_FALSE(Render("{{ 'x' * 1000000000 }}").ok());
}

TEST(JinjaRenderTest, NamespaceAssignmentNeedsANamespace) {
  absl::StatusOr<std::string> r = Render("{% set d = {} %}{% set d.x = 1 %}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a namespace()"), std::string::npos);
  EXPECT_EQ(*Render("{% set ns = namespace(x=1) %}{% set ns.x = ns.x + 1 %}{{ ns.x }}"), "2");
}

// Every prefix and every one-byte deletion of a template using most
// constructs parses (or fails) and renders (or fails) without crashing.
TEST(JinjaRobustnessTest, TruncatedAndCorruptedTemplatesNeverCrash) {
  const std::string source =
      "{%- set ns = namespace(a=1, s='') -%}\n{# c #}{% macro m(x, y=2) %}{{ x ~ y }}{% endmacro %}"
      "{% for k, v in {'a': [1, 2.5], 'b': none}.items() if k != 'z' %}{{ loop.index }}"
      "{{ v | tojson(indent=2) }}{% if v is none %}{% continue %}{% elif v[0] > 0 %}"
      "{% set ns.s = ns.s + 'x' %}{% else %}{% break %}{% endif %}{% endfor %}"
      "{{ m('q') }}{{ 'a\\'b'[::-1] | upper | trim }}{{ [1, 2][-1] if true else -1 }}"
      "{{ \"x\".split('x')[0].startswith('') and not (1 // 1 % 1) }}{% raw %}{{ }}{% endraw %}";
  ASSERT_TRUE(Render(source).ok()) << Render(source).status();
  for (size_t n = 0; n <= source.size(); ++n) (void)Render(source.substr(0, n));
  for (size_t i = 0; i < source.size(); ++i)
    (void)Render(source.substr(0, i) + source.substr(i + 1));
}

}  // namespace
}  // namespace ced::jinja
