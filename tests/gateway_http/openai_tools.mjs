// The official `openai` npm client against a gateway whose model writes a
// tool call: prints what the client made of it, whole and streamed (the
// stream's tool_calls deltas merged by index, as clients do), as one JSON
// object (tests/gateway_http/openai_http_test.cc checks it).
// Usage: node openai_tools.mjs NODE_MODULES_DIR BASE_URL MODEL MAX_TOKENS
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [modulesArg, baseURL, model, maxTokens] = process.argv.slice(2);
const { default: OpenAI } = await import(
  pathToFileURL(join(resolve(modulesArg), "openai", "index.mjs")).href);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });

const request = {
  model,
  max_tokens: Number(maxTokens),
  messages: [{ role: "user", content: "Weather?" }],
  tools: [{ type: "function", function: { name: "w" } }],
};
const out = {};
const whole = await client.chat.completions.create(request);
const message = whole.choices[0].message;
out.whole = {
  content: message.content,
  finish_reason: whole.choices[0].finish_reason,
  tool_calls: (message.tool_calls ?? []).map((c) => ({
    id: c.id, type: c.type, name: c.function.name, arguments: JSON.parse(c.function.arguments) })),
};

const calls = [];
let content = "";
let finish = null;
const stream = await client.chat.completions.create({ ...request, stream: true });
for await (const chunk of stream) {
  for (const choice of chunk.choices) {
    content += choice.delta.content ?? "";
    if (choice.finish_reason) finish = choice.finish_reason;
    for (const d of choice.delta.tool_calls ?? []) {
      const c = (calls[d.index] ??= { id: "", type: "", name: "", arguments: "" });
      c.id += d.id ?? "";
      c.type += d.type ?? "";
      c.name += d.function?.name ?? "";
      c.arguments += d.function?.arguments ?? "";
    }
  }
}
out.streamed = {
  content,
  finish_reason: finish,
  tool_calls: calls.map((c) => ({ ...c, arguments: JSON.parse(c.arguments) })),
};
process.stdout.write(JSON.stringify(out) + "\n");
