// Drives the gateway's OpenAI-compatible API with the official `openai` npm
// client: completions (with and without penalties) and chat (system and
// developer messages), streamed and not, two choices (n), logprobs, and two
// errors. Prints one JSON object with what came back
// (tests/gateway_http/openai_cluster_test.cc compares it with the gRPC API's
// answer for the same request).
// Usage: node openai_client.mjs NODE_MODULES_DIR BASE_URL MODEL
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [modulesArg, baseURL, model] = process.argv.slice(2);
const { default: OpenAI } = await import(
  pathToFileURL(join(resolve(modulesArg), "openai", "index.mjs")).href);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });

const sampling = { max_tokens: 12, temperature: 0.8, seed: 42, ignore_eos: true };
const prompt = "The quick brown fox";
const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "Say hi" }];
const out = {};

const completion = await client.completions.create({ model, prompt, ...sampling });
out.completion = {
  text: completion.choices[0].text,
  finish_reason: completion.choices[0].finish_reason,
  usage: completion.usage,
  object: completion.object,
};

const penalized = await client.completions.create({
  model, prompt, ...sampling, presence_penalty: 0.5, frequency_penalty: 1.2 });
out.completion_penalties = { text: penalized.choices[0].text };

let text = "";
const reasons = [];
let usage = null;
let chunks = 0;
const stream = await client.completions.create({
  model, prompt, ...sampling, stream: true, stream_options: { include_usage: true } });
for await (const chunk of stream) {
  chunks += 1;
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    text += c.text;
    reasons.push(c.finish_reason);
  }
}
out.completion_stream = { text, finish_reasons: reasons, usage, chunks };

const chat = await client.chat.completions.create({ model, messages, ...sampling });
out.chat = {
  text: chat.choices[0].message.content,
  role: chat.choices[0].message.role,
  finish_reason: chat.choices[0].finish_reason,
  usage: chat.usage,
};

text = "";
const chatReasons = [];
let role = null;
const chatStream = await client.chat.completions.create({
  model, messages, max_completion_tokens: 12, temperature: 0.8, seed: 42, ignore_eos: true,
  stream: true });
for await (const chunk of chatStream) {
  for (const c of chunk.choices) {
    if (c.delta.role) role = c.delta.role;
    text += c.delta.content ?? "";
    chatReasons.push(c.finish_reason);
  }
}
out.chat_stream = { text, role, finish_reasons: chatReasons };

// OpenAI's newer name for the system role, as the client's README writes it.
const developer = await client.chat.completions.create({
  model, messages: [{ role: "developer", content: "Be brief." }, messages[1]], ...sampling });
out.chat_developer = { text: developer.choices[0].message.content };

async function errorOf(params) {
  try {
    await client.completions.create(params);
    return { status: 0 };
  } catch (e) {
    return { status: e.status, param: e.param ?? null, type: e.type ?? null, code: e.code ?? null };
  }
}
out.unknown_model = await errorOf({ model: "no-such-model", prompt });
out.n_too_many = await errorOf({ model, prompt, n: 17 });
const two = await client.completions.create({ model, prompt, ...sampling, n: 2 });
out.two_choices = {
  texts: two.choices.map((c) => c.text),
  indexes: two.choices.map((c) => c.index),
  usage: two.usage,
};
out.models = (await client.models.list()).data.map((m) => m.id);

// Log-probabilities: chat (logprobs + top_logprobs), streamed and not, and
// completions (logprobs: the number of most probable tokens).
const entry = (e) => ({ token: e.token, logprob: e.logprob, bytes: e.bytes,
  top: e.top_logprobs.map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes })) });
const chatLogprobs = await client.chat.completions.create({
  model, messages, ...sampling, logprobs: true, top_logprobs: 2 });
out.chat_logprobs = {
  text: chatLogprobs.choices[0].message.content,
  content: chatLogprobs.choices[0].logprobs.content.map(entry),
};
const streamed = [];
const chatLogprobsStream = await client.chat.completions.create({
  model, messages, ...sampling, logprobs: true, top_logprobs: 2, stream: true });
for await (const chunk of chatLogprobsStream) {
  for (const c of chunk.choices) {
    if (c.logprobs) streamed.push(...c.logprobs.content.map(entry));
  }
}
out.chat_logprobs_stream = { content: streamed };
const completionLogprobs = await client.completions.create({
  model, prompt, ...sampling, logprobs: 2 });
out.completion_logprobs = completionLogprobs.choices[0].logprobs;

process.stdout.write(JSON.stringify(out) + "\n");
