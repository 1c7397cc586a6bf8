// Streams a message with Anthropic's TypeScript SDK (@anthropic-ai/sdk, the
// client Claude Code is built on) against a running rill, twice with the same
// prompt, and counts its tokens: it prints the event types, the text and the
// usage, and checks that the three input counts add up to count_tokens and
// that the second run reads from the prefix cache what the first wrote. It is
// a manual check, not part of `go test`.
//
//   ANTHROPIC_SDK_DIR=/work/npm-anthropic node scripts/anthropic/messages.mjs [base URL] [model]
//
// ANTHROPIC_SDK_DIR is a folder outside the repository where
// `npm install @anthropic-ai/sdk` was run. The defaults are
// http://127.0.0.1:8080 and the first model of GET /v1/models; the key, if
// the server wants one, comes from ANTHROPIC_API_KEY (sent as x-api-key). It
// exits non-zero when a check fails.
import { createRequire } from "node:module";
import path from "node:path";

const dir = process.env.ANTHROPIC_SDK_DIR;
if (!dir) {
  console.error("set ANTHROPIC_SDK_DIR to the folder where `npm install @anthropic-ai/sdk` was run");
  process.exit(2);
}
const require = createRequire(path.join(dir, "package.json"));
const { default: Anthropic } = await import(require.resolve("@anthropic-ai/sdk"));

const baseURL = process.argv[2] ?? "http://127.0.0.1:8080";
const apiKey = process.env.ANTHROPIC_API_KEY ?? "none";
let model = process.argv[3];
if (!model) {
  const res = await fetch(baseURL + "/v1/models", { headers: { "x-api-key": apiKey } });
  model = (await res.json()).data[0].id;
}
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0 });

function fail(msg) {
  console.error("FAIL: " + msg);
  process.exit(1);
}

const request = {
  model,
  max_tokens: 16,
  system: [{ type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } }],
  messages: [{ role: "user", content: "Tell me about the river that runs past the mill, under the old stone bridge, down to the sea." }],
};

const { input_tokens: counted } = await client.messages.countTokens({ model, system: request.system, messages: request.messages });
console.log(`count_tokens: ${counted}`);

const runs = [];
for (const run of [1, 2]) {
  const stream = client.messages.stream(request);
  const types = [];
  stream.on("streamEvent", (ev) => types.push(ev.type));
  const msg = await stream.finalMessage();
  const text = msg.content.filter((b) => b.type === "text").map((b) => b.text).join("");
  console.log(`run ${run}: events ${types.join(" ")}`);
  console.log(`run ${run}: ${msg.id} stop_reason ${msg.stop_reason} text ${JSON.stringify(text)}`);
  console.log(`run ${run}: usage ${JSON.stringify(msg.usage)}`);
  if (types[0] !== "message_start" || types.at(-1) !== "message_stop") fail(`run ${run}: events do not run from message_start to message_stop`);
  const u = msg.usage;
  const prompt = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;
  if (prompt !== counted) fail(`run ${run}: input ${u.input_tokens} + cache read ${u.cache_read_input_tokens} + cache creation ${u.cache_creation_input_tokens} = ${prompt}, count_tokens ${counted}`);
  if (!(u.output_tokens > 0)) fail(`run ${run}: no output tokens`);
  runs.push(u);
}
const [cold, warm] = runs;
if (warm.cache_creation_input_tokens !== 0) fail("the repeated prompt wrote to the cache");
if (warm.cache_read_input_tokens !== cold.cache_read_input_tokens + cold.cache_creation_input_tokens) {
  fail("the repeated prompt does not read what the first one read or wrote");
}
console.log("ok");
