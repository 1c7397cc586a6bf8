// Background responses and a resumable chat stream through the official
// openai npm SDK, unchanged, against a running rill: a background response
// is created, polled, streamed from the middle (starting_after), listed
// (input_items), and a second one cancelled; a resumable chat stream is read
// in part and finished with a GET that carries Last-Event-ID. A manual check
// (issue 29), not part of `go test`.
//
//   OPENAI_NODE_DIR=/work/npm-openai node scripts/openai-node/background.mjs [base URL] [model]
//
// OPENAI_NODE_DIR is a folder outside the repository where `npm i openai` was
// run. Defaults: http://127.0.0.1:8080/v1 and the first model of GET
// /v1/models. It prints what it saw and exits non-zero on any mismatch.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const dir = process.env.OPENAI_NODE_DIR;
if (!dir) {
  console.error("set OPENAI_NODE_DIR to the folder where `npm i openai` was run");
  process.exit(2);
}
const require = createRequire(path.join(dir, "package.json"));
const OpenAI = (await import(require.resolve("openai"))).default;
const { version } = JSON.parse(fs.readFileSync(path.join(dir, "node_modules/openai/package.json"), "utf8"));

const baseURL = process.argv[2] ?? "http://127.0.0.1:8080/v1";
const apiKey = process.env.OPENAI_API_KEY ?? "none";
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const model = process.argv[3] ?? (await client.models.list()).data[0].id;
let failed = 0;
const check = (ok, what) => {
  console.log((ok ? "ok   " : "FAIL ") + what);
  if (!ok) failed++;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

console.log(`openai ${version} against ${baseURL}, model ${model}`);
const params = { model, input: "Tell me about the river.", max_output_tokens: 48, temperature: 0 };

// The same request in the foreground: what the background one must equal.
const fg = await client.responses.create(params);

const bg = await client.responses.create({ ...params, background: true });
check(["queued", "in_progress"].includes(bg.status), `background create answers at once: ${bg.status}`);
let polled = bg;
for (let i = 0; i < 600 && ["queued", "in_progress"].includes(polled.status); i++) {
  await sleep(50);
  polled = await client.responses.retrieve(bg.id);
}
check(polled.status === fg.status && !["queued", "in_progress"].includes(polled.status), `polled to ${polled.status}, as the foreground run ended (${fg.status})`);
check(polled.output_text === fg.output_text, `background text equals the foreground's (${JSON.stringify(polled.output_text.slice(0, 40))}…)`);
check(polled.usage?.output_tokens === fg.usage?.output_tokens, `usage ${polled.usage?.output_tokens} output tokens, foreground ${fg.usage?.output_tokens}`);

// Streamed from the middle: every event after sequence number 3.
const stream = await client.responses.retrieve(bg.id, { stream: true, starting_after: 3 });
const seqs = [];
let tail = "";
for await (const ev of stream) {
  seqs.push(ev.sequence_number);
  if (ev.type === "response.output_text.delta") tail += ev.delta;
}
check(seqs.length > 0 && seqs[0] === 4 && seqs.every((s, i) => s === 4 + i), `stream from starting_after 3: events ${seqs[0]}..${seqs.at(-1)} with no gap`);
check(tail.length > 0 && fg.output_text.endsWith(tail), `the streamed tail is the end of the text (${tail.length} of ${fg.output_text.length} chars)`);

const items = await client.responses.inputItems.list(bg.id);
check(items.data.length === 1 && items.data[0].type === "message", `input_items: ${items.data.length} item(s), ${items.data[0]?.type}`);

const long = await client.responses.create({ ...params, max_output_tokens: 4000, background: true });
await sleep(100);
const cancelled = await client.responses.cancel(long.id);
check(cancelled.status === "cancelled", `cancel: ${cancelled.status}`);

// A resumable chat stream: read two content chunks, drop, resume elsewhere
// in the stream with Last-Event-ID through the SDK's raw GET.
const body = { model, messages: [{ role: "user", content: "Tell me about the sea." }], max_tokens: 32, temperature: 0 };
const whole = (await client.chat.completions.create(body)).choices[0].message.content;
const resp = await client.chat.completions
  .create({ ...body, stream: true, stream_options: { resumable: true } })
  .asResponse();
const reader = resp.body.getReader();
let buf = "", head = "", lastId = -1, id = "", got = 0;
while (got < 2) {
  const { value, done } = await reader.read();
  if (done) break;
  buf += new TextDecoder().decode(value);
  let k;
  while ((k = buf.indexOf("\n\n")) >= 0 && got < 2) {
    const event = buf.slice(0, k);
    buf = buf.slice(k + 2);
    for (const line of event.split("\n")) {
      if (line.startsWith("id: ")) lastId = Number(line.slice(4));
      if (line.startsWith("data: {")) {
        const c = JSON.parse(line.slice(6));
        id ||= c.id;
        const d = c.choices[0]?.delta?.content;
        if (d) { head += d; got++; }
      }
    }
  }
}
await reader.cancel();
const rest = await client.get(`/chat/completions/${id}`, {
  headers: { "Last-Event-ID": String(lastId) }, stream: true, __binaryResponse: false,
}).asResponse();
const text = await rest.text();
let tailText = "";
for (const line of text.split("\n")) {
  if (line.startsWith("data: {")) tailText += JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? "";
}
check(text.includes("data: [DONE]"), "the resumed stream ends with [DONE]");
check(head + tailText === whole, `resumed text equals the uninterrupted answer (${head.length} + ${tailText.length} chars)`);

console.log(failed ? `${failed} check(s) failed` : "all checks passed");
process.exit(failed ? 1 : 0);
