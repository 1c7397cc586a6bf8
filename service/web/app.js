// rill's built-in page: chat with a model over SSE or WebSocket, watch the
// tokens arrive, see each answer's usage and the server's figures from
// /metrics. Plain JavaScript, no dependencies. The API key lives in this
// page's memory only: it is never stored.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  messages: [],   // the conversation sent with each request
  busy: null,     // the answer streaming now: {stop()}
  ws: null,       // {socket, key, ready: Promise, handlers: Map}
  nextID: 1,
  metrics: null,  // the previous /metrics poll: {at, samples}
};

function apiKey() { return $("api-key").value.trim(); }

function authHeaders() {
  const h = {"Content-Type": "application/json"};
  if (apiKey()) h["Authorization"] = "Bearer " + apiKey();
  return h;
}

function showError(message) {
  const el = $("error");
  el.textContent = message;
  el.hidden = !message;
}

// errorText reads an OpenAI-shaped error body, or says what the status was.
async function errorText(resp) {
  try {
    const body = await resp.json();
    if (body && body.error && body.error.message) return body.error.message;
  } catch (_) { /* not JSON */ }
  return "HTTP " + resp.status;
}

// ---- models -------------------------------------------------------------

async function loadModels() {
  let resp;
  try {
    resp = await fetch("/v1/models", {headers: authHeaders()});
  } catch (err) {
    showError("Cannot reach the server: " + err.message);
    return;
  }
  if (resp.status === 401) {
    showError("This server needs an API key: type it in the API key field.");
    return;
  }
  if (!resp.ok) {
    showError("Listing models failed: " + await errorText(resp));
    return;
  }
  const list = (await resp.json()).data || [];
  const select = $("model");
  const previous = select.value;
  select.replaceChildren();
  for (const m of list) {
    const opt = document.createElement("option");
    opt.value = m.id;
    opt.textContent = m.id;
    if (m.description) opt.title = m.description;
    select.append(opt);
  }
  if (list.some((m) => m.id === previous)) select.value = previous;
  showError("");
  pollMetrics();
}

// ---- transcript ---------------------------------------------------------

function addMessage(role, text) {
  const li = document.createElement("li");
  li.className = "msg " + role;
  const who = document.createElement("div");
  who.className = "who";
  who.textContent = role === "user" ? "you" : $("model").value;
  li.append(who);
  const reasoning = document.createElement("div");
  reasoning.className = "reasoning";
  reasoning.hidden = true;
  const body = document.createElement("div");
  body.className = "text";
  body.textContent = text;
  li.append(reasoning, body);
  if (role === "assistant") {
    const usage = document.createElement("div");
    usage.className = "answer-usage";
    usage.dataset.testid = "answer-usage";
    li.append(usage);
  }
  $("output").append(li);
  li.scrollIntoView({block: "end"});
  return li;
}

// Answer is one assistant message being streamed into the transcript.
class Answer {
  constructor() {
    this.li = addMessage("assistant", "");
    this.li.classList.add("streaming");
    this.text = "";
    this.started = performance.now();
    this.firstAt = 0;
    this.pieces = 0;
    this.usage = null;
  }

  // chunk takes one chat.completion.chunk, from SSE or WebSocket alike.
  chunk(c) {
    if (c.error) throw new Error(c.error.message || "stream error");
    for (const choice of c.choices || []) {
      const d = choice.delta || {};
      const reasoning = d.reasoning_content || d.reasoning || "";
      if (reasoning) this.append(".reasoning", reasoning);
      if (d.content) {
        this.text += d.content;
        this.append(".text", d.content);
      }
    }
    if (c.usage) this.usage = c.usage;
  }

  append(selector, piece) {
    if (!this.firstAt) this.firstAt = performance.now();
    this.pieces++;
    const el = this.li.querySelector(selector);
    el.hidden = false;
    el.textContent += piece;
    this.li.scrollIntoView({block: "end"});
  }

  // end closes the answer: how ("done", "stopped" or an error message).
  end(how) {
    this.li.classList.remove("streaming");
    const line = this.li.querySelector(".answer-usage");
    const u = this.usage;
    const ttft = this.firstAt ? this.firstAt - this.started : 0;
    const seconds = this.firstAt ? (performance.now() - this.firstAt) / 1000 : 0;
    const completion = u ? u.completion_tokens : this.pieces;
    const rate = seconds > 0 && completion > 1 ? (completion - 1) / seconds : 0;
    if (u) {
      const pd = u.prompt_tokens_details || {};
      const cd = u.completion_tokens_details || {};
      const parts = [u.prompt_tokens + " prompt"];
      if (pd.cached_tokens != null) parts.push(pd.cached_tokens + " cached");
      parts.push(u.completion_tokens + " completion");
      if (cd.reasoning_tokens != null) parts.push(cd.reasoning_tokens + " reasoning");
      if (cd.accepted_prediction_tokens != null) parts.push(cd.accepted_prediction_tokens + " drafts accepted");
      if (cd.rejected_prediction_tokens != null) parts.push(cd.rejected_prediction_tokens + " rejected");
      line.textContent = parts.join(" · ");
      showUsage(u, ttft, rate);
    }
    if (how === "stopped") {
      this.li.classList.add("stopped");
      line.textContent = "stopped" + (line.textContent ? " · " + line.textContent : "");
    } else if (how !== "done") {
      this.li.classList.add("failed");
      line.textContent = how;
    }
    if (this.text) state.messages.push({role: "assistant", content: this.text});
    this.li.scrollIntoView({block: "end"});
  }
}

function showUsage(u, ttftMs, rate) {
  const pd = u.prompt_tokens_details || {};
  const cd = u.completion_tokens_details || {};
  const set = (field, v) => {
    $("usage").querySelector(`[data-field="${field}"]`).textContent = v == null ? "–" : String(v);
  };
  set("prompt", u.prompt_tokens);
  set("cached", pd.cached_tokens);
  set("completion", u.completion_tokens);
  set("reasoning", cd.reasoning_tokens);
  set("accepted", cd.accepted_prediction_tokens);
  set("rejected", cd.rejected_prediction_tokens);
  set("ttft", ttftMs ? ttftMs.toFixed(0) + " ms" : null);
  set("rate", rate ? rate.toFixed(1) : null);
}

// ---- sending ------------------------------------------------------------

function requestBody() {
  const body = {
    model: $("model").value,
    messages: state.messages.slice(),
    stream: true,
    stream_options: {include_usage: true},
  };
  const maxTokens = parseInt($("max-tokens").value, 10);
  if (maxTokens > 0) body.max_tokens = maxTokens;
  const temperature = parseFloat($("temperature").value);
  if (!Number.isNaN(temperature)) body.temperature = temperature;
  return body;
}

function transport() {
  return document.querySelector('input[name="transport"]:checked').value;
}

async function send() {
  const text = $("prompt").value;
  if (!text.trim() || state.busy) return;
  if (!$("model").value) {
    await loadModels();
    if (!$("model").value) return;
  }
  showError("");
  $("prompt").value = "";
  state.messages.push({role: "user", content: text});
  addMessage("user", text);
  const answer = new Answer();
  const body = requestBody();
  setBusy(true);
  let how = "done";
  try {
    if (transport() === "ws") {
      await streamWebSocket(body, answer);
    } else {
      await streamSSE(body, answer);
    }
  } catch (err) {
    how = err.name === "AbortError" || err.stopped ? "stopped" : err.message;
    if (how !== "stopped") showError(how);
  }
  answer.end(how);
  setBusy(false);
  pollMetrics();
}

function setBusy(busy) {
  if (!busy) state.busy = null;
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

// streamSSE posts body and feeds its data: events to answer.
async function streamSSE(body, answer) {
  const abort = new AbortController();
  state.busy = {stop: () => abort.abort()};
  const resp = await fetch("/v1/chat/completions", {
    method: "POST", headers: authHeaders(), body: JSON.stringify(body), signal: abort.signal,
  });
  if (!resp.ok) throw new Error(await errorText(resp));
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue; // comments (": ping")
        const data = line.slice(5).trimStart();
        if (data === "[DONE]") return;
        answer.chunk(JSON.parse(data));
      }
    }
  }
  throw new Error("the stream ended without [DONE]");
}

// socket returns the open WebSocket for the current key, opening one when
// needed. The key goes as the subprotocol browsers can send.
function socket() {
  const key = apiKey();
  if (state.ws && state.ws.key === key && state.ws.socket.readyState <= WebSocket.OPEN) return state.ws;
  if (state.ws) state.ws.socket.close();
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/chat/completions";
  const s = new WebSocket(url, key ? ["openai-insecure-api-key." + key] : []);
  const ws = {socket: s, key, handlers: new Map()};
  ws.ready = new Promise((resolve, reject) => {
    s.onopen = resolve;
    s.onerror = () => reject(new Error("WebSocket connection failed (is the API key right?)"));
  });
  s.onmessage = (e) => {
    const m = JSON.parse(e.data);
    const h = ws.handlers.get(m.request_id);
    if (h) h(m);
    else if (m.type === "error") showError(m.error.message);
  };
  s.onclose = () => {
    for (const h of ws.handlers.values()) h({type: "error", error: {message: "the WebSocket connection closed"}});
    ws.handlers.clear();
    if (state.ws === ws) state.ws = null;
  };
  state.ws = ws;
  return ws;
}

// streamWebSocket runs body as one create on the page's connection.
async function streamWebSocket(body, answer) {
  const ws = socket();
  await ws.ready;
  const id = "page-" + state.nextID++;
  let stopped = false;
  state.busy = {
    stop: () => {
      stopped = true;
      ws.socket.send(JSON.stringify({type: "cancel", request_id: id}));
    },
  };
  await new Promise((resolve, reject) => {
    ws.handlers.set(id, (m) => {
      try {
        if (m.type === "chunk") {
          answer.chunk(m.chunk);
          return;
        }
        ws.handlers.delete(id);
        if (m.type === "done") resolve();
        else if (stopped && m.error && m.error.code === "request_cancelled") reject(Object.assign(new Error("stopped"), {stopped: true}));
        else reject(new Error(m.error ? m.error.message : "unexpected message " + m.type));
      } catch (err) {
        ws.handlers.delete(id);
        reject(err);
      }
    });
    ws.socket.send(JSON.stringify({type: "create", request_id: id, body}));
  });
}

// ---- server figures -----------------------------------------------------

// parseMetrics reads the Prometheus text format into samples
// {name, labels, value}. Comments, histograms' buckets and all are kept as
// plain samples.
function parseMetrics(text) {
  const samples = [];
  const lineRE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
  const labelRE = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = lineRE.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || "").matchAll(labelRE)) {
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    samples.push({name: m[1], labels, value: Number(m[3])});
  }
  return samples;
}

// total sums name's samples of model (all models when model is "").
function total(samples, name, model) {
  let sum = 0, found = false;
  for (const s of samples) {
    if (s.name === name && (!model || s.labels.model_name === model)) {
      sum += s.value;
      found = true;
    }
  }
  return found ? sum : null;
}

let polling = null;

async function pollMetrics() {
  clearTimeout(polling);
  polling = setTimeout(pollMetrics, 2000);
  let text;
  try {
    const resp = await fetch("/metrics", {headers: apiKey() ? {"Authorization": "Bearer " + apiKey()} : {}});
    if (!resp.ok) return;
    text = await resp.text();
  } catch (_) {
    return; // the server is away: the next poll tries again
  }
  const now = performance.now();
  const samples = parseMetrics(text);
  const model = $("model").value;
  $("server-model").textContent = model ? "(" + model + ")" : "";
  const get = (name) => total(samples, name, model);
  const prev = state.metrics && state.metrics.model === model ? state.metrics : null;
  const delta = (name) => {
    const a = get(name), b = prev ? total(prev.samples, name, model) : null;
    return a == null || b == null ? null : a - b;
  };
  const seconds = prev ? (now - prev.at) / 1000 : 0;
  const rate = (name) => {
    const d = delta(name);
    return d == null || seconds <= 0 ? null : (d / seconds).toFixed(1);
  };
  const ratio = (num, den) => {
    // Over the last interval when something happened, else since start.
    let n = delta(num), d = delta(den);
    if (!d) { n = get(num); d = get(den); }
    return d ? (100 * n / d).toFixed(1) + " %" : null;
  };
  const set = (field, v) => {
    $("server").querySelector(`[data-field="${field}"]`).textContent = v == null ? "–" : String(v);
  };
  set("gen-rate", rate("rill_generation_tokens_total"));
  set("prompt-rate", rate("rill_prompt_tokens_total"));
  set("cache-hit", ratio("rill_prefix_cache_hits_total", "rill_prefix_cache_queries_total"));
  set("draft-accept", ratio("rill_spec_decode_num_accepted_tokens_total", "rill_spec_decode_num_draft_tokens_total"));
  set("running", get("rill_num_requests_running"));
  set("waiting", get("rill_num_requests_waiting"));
  const kv = get("rill_kv_cache_usage_perc");
  set("kv", kv == null ? null : (100 * kv).toFixed(1) + " %");
  const n = get("rill_time_to_first_token_seconds_count"), s = get("rill_time_to_first_token_seconds_sum");
  set("ttft", n ? (1000 * s / n).toFixed(1) + " ms" : null);
  state.metrics = {at: now, samples, model};
}

// ---- wiring -------------------------------------------------------------

function init() {
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    send();
  });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      send();
    }
  });
  $("stop").addEventListener("click", () => {
    if (state.busy) state.busy.stop();
  });
  $("clear").addEventListener("click", () => {
    if (state.busy) state.busy.stop();
    state.messages = [];
    $("output").replaceChildren();
    showError("");
  });
  $("api-key").addEventListener("change", () => {
    if (state.ws) state.ws.socket.close();
    loadModels();
  });
  $("model").addEventListener("change", () => {
    state.metrics = null;
    pollMetrics();
  });
  for (const radio of document.querySelectorAll('input[name="transport"]')) {
    radio.addEventListener("change", () => {
      if (transport() === "sse" && state.ws) state.ws.socket.close();
    });
  }
  loadModels();
}

init();
