// Streams text with usage from the AI SDK's default OpenAI provider
// (createOpenAI()(model), which speaks the Responses API) against a running
// rill, then makes a second, non-streamed call that continues the
// conversation, and a third from the history as messages. It is a manual check, not part of `go test`.
//
//   AISDK_DIR=/work/peer-aisdk node scripts/aisdk/responses.mjs [base URL] [model]
//
// AISDK_DIR is a folder outside the repository where `npm i ai @ai-sdk/openai`
// was run (see scripts/aisdk/README.md). The defaults are
// http://127.0.0.1:8080/v1 and the first model of GET /v1/models. It exits
// non-zero when the stream has no text, no usage, or usage that does not add up.
import { createRequire } from "node:module";
import path from "node:path";

const dir = process.env.AISDK_DIR;
if (!dir) {
  console.error("set AISDK_DIR to the folder where `npm i ai @ai-sdk/openai` was run");
  process.exit(2);
}
const require = createRequire(path.join(dir, "package.json"));
const { streamText, generateText } = await import(require.resolve("ai"));
const { createOpenAI } = await import(require.resolve("@ai-sdk/openai"));

const baseURL = process.argv[2] ?? "http://127.0.0.1:8080/v1";
let model = process.argv[3];
if (!model) {
  const res = await fetch(baseURL + "/models", { headers: { Authorization: "Bearer " + (process.env.OPENAI_API_KEY ?? "none") } });
  model = (await res.json()).data[0].id;
}
const openai = createOpenAI({ baseURL, apiKey: process.env.OPENAI_API_KEY ?? "none" });

function fail(msg) {
  console.error("FAIL: " + msg);
  process.exit(1);
}

function checkUsage(what, u) {
  console.log(`${what} usage: ${JSON.stringify(u)}`);
  if (!(u.inputTokens > 0) || !(u.outputTokens > 0)) fail(`${what}: no input or output tokens`);
  if (u.totalTokens !== u.inputTokens + u.outputTokens) fail(`${what}: totalTokens is not input + output`);
}

// 1. Streamed, as createOpenAI()(model) does by default: the Responses API.
const first = streamText({
  model: openai(model),
  prompt: "Tell me about the river.",
  maxOutputTokens: 12,
});
let text = "";
for await (const delta of first.textStream) {
  process.stdout.write(delta);
  text += delta;
}
process.stdout.write("\n");
const usage = await first.usage;
const finish = await first.finishReason;
const meta = await first.providerMetadata;
console.log(`finish reason: ${finish}; response id: ${meta?.openai?.responseId}`);
if (text.length === 0) fail("the stream had no text");
checkUsage("streamed", usage);

// 2. Not streamed, continuing the conversation with previous_response_id.
const second = await generateText({
  model: openai(model),
  prompt: "And about the sea?",
  maxOutputTokens: 8,
  providerOptions: { openai: { previousResponseId: meta?.openai?.responseId } },
});
console.log(`second: ${JSON.stringify(second.text)}`);
checkUsage("continued", second.usage);
if (!(second.usage.inputTokens > usage.inputTokens)) fail("the continued conversation is not longer than the first turn");

// 3. The history as messages: the SDK sends the stored assistant message back
// as an item_reference to its id.
const history = [{ role: "user", content: "And about the sea?" }, ...second.response.messages];
const third = await generateText({
  model: openai(model),
  messages: [...history, { role: "user", content: "And the hills?" }],
  maxOutputTokens: 8,
});
console.log(`third: ${JSON.stringify(third.text)}`);
checkUsage("from messages", third.usage);
console.log("ok");
