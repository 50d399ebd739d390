// The reference token ids: @huggingface/tokenizers (pure JS, by Hugging Face)
// encodes every document of a corpus (make_corpus.py's format) and decodes the
// ids again (skip_special_tokens, as HfTokenizer::Decode does).
//
//   node reference_tokenize.mjs --tokenizer DIR --corpus FILE --out FILE [--bench N]
//
// DIR holds tokenizer.json and tokenizer_config.json. The output is
// "<document count>\n" then, per document, a line of space-separated ids and
// the decoded text as "<byte length>\n<bytes>\n". With --bench N it instead
// times N passes of encode over the corpus (after one warm-up pass) and
// prints one JSON line: {"bytes", "tokens", "seconds", "cpu_seconds", "passes"}.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createRequire } from "node:module";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
for (const flag of ["tokenizer", "corpus"]) {
  if (!args[flag]) {
    console.error(`reference_tokenize.mjs: --${flag} is required`);
    process.exit(2);
  }
}
// Resolved from tests/node/node_modules (or NODE_PATH-like CED_NODE_MODULES).
const modules = process.env.CED_NODE_MODULES ?? new URL("../node/node_modules/", import.meta.url).pathname;
const require = createRequire(join(modules, "noop.js"));
const mod = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = mod.Tokenizer ?? mod.default.Tokenizer;

const tokenizer = new Tokenizer(
  JSON.parse(readFileSync(join(args.tokenizer, "tokenizer.json"), "utf8")),
  JSON.parse(readFileSync(join(args.tokenizer, "tokenizer_config.json"), "utf8")));

function readCorpus(path) {
  const buf = readFileSync(path);
  let pos = 0;
  const line = () => {
    const nl = buf.indexOf(10, pos);
    const s = buf.subarray(pos, nl).toString("latin1");
    pos = nl + 1;
    return parseInt(s, 10);
  };
  const count = line();
  const docs = [];
  const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
  for (let i = 0; i < count; ++i) {
    const n = line();
    docs.push(decoder.decode(buf.subarray(pos, pos + n)));  // ill-formed bytes -> U+FFFD
    pos += n + 1;
  }
  return { docs, bytes: buf.length };
}

const { docs } = readCorpus(args.corpus);
if (args.bench) {
  const passes = parseInt(args.bench, 10);
  let bytes = 0;
  for (const d of docs) bytes += Buffer.byteLength(d, "utf8");
  for (const d of docs) tokenizer.encode(d);  // warm-up (fills the reference's word cache)
  let tokens = 0;
  const cpu0 = process.cpuUsage();
  const start = process.hrtime.bigint();
  for (let p = 0; p < passes; ++p) {
    for (const d of docs) tokens += tokenizer.encode(d).ids.length;
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  const cpu_seconds = (cpu.user + cpu.system) / 1e6;
  console.log(JSON.stringify({ bytes: bytes * passes, tokens, seconds, cpu_seconds, passes }));
} else {
  const chunks = [Buffer.from(`${docs.length}\n`)];
  for (const d of docs) {
    const ids = tokenizer.encode(d).ids;
    const text = ids.length ? tokenizer.decode(ids, { skip_special_tokens: true }) : "";
    const bytes = Buffer.from(text, "utf8");
    chunks.push(Buffer.from(`${ids.join(" ")}\n${bytes.length}\n`), bytes, Buffer.from("\n"));
  }
  writeFileSync(args.out, Buffer.concat(chunks));
}
