// The direct-vs-acpgate comparison's v2 side: one scripted run of the official ACP
// TypeScript SDK's v2 client (`experimental/v2` of @agentclientprotocol/sdk, which checks
// every message it reads against its v2 types) on a peer over stdio. It imports no acpgate
// code.
//
//   node ts_v2_compare.mjs <sdk dir> <cwd> <mode option value|-> <tool prompt> <slow prompt> -- <argv...>
//
// <argv...> is the peer: the adapter itself, or `python -m acpgate acp --config-dir D`.
// Steps: initialize (v2); session/new; the mode option set to <mode option value> (unless
// -); a prompt "hello", then <tool prompt> (a permission request answered with its first
// allow option), each run to its idle state_update; then <slow prompt>, cancelled at its
// first message chunk, run to idle; session/close. Prints one JSON line: each step's
// result or error, the update kinds and message text of each turn, the idle updates, the
// update kinds of the whole run, and the permission requests.
import path from "node:path";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

const args = process.argv.slice(2);
const [sdkDir, cwd, modeValue, toolPrompt, slowPrompt] = args;
const argv = args.slice(args.indexOf("--") + 1);
const dist = path.join(sdkDir, "node_modules/@agentclientprotocol/sdk/dist");
const v2 = await import(path.join(dist, "v2/stable/acp.js"));

const child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "ignore"], cwd });
const stream = v2.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

const out = { steps: {}, turns: {}, kinds: [], permissions: [] };
let turn = null;
let waiting = null;
const app = v2.client()
  .onNotification("session/update", (cx) => {
    const u = cx.params.update;
    if (!out.kinds.includes(u.sessionUpdate)) out.kinds.push(u.sessionUpdate);
    if (turn === null) return;
    turn.kinds.push(u.sessionUpdate);
    if (u.sessionUpdate === "agent_message_chunk" && u.content?.type === "text") {
      turn.text += u.content.text;
      if (waiting?.onChunk) waiting.onChunk();
    }
    if (u.sessionUpdate === "state_update" && u.state === "idle" && u.stopReason) {
      turn.idle = u;
      if (waiting) waiting.done();
    }
  })
  .onRequest("session/request_permission", async (cx) => {
    out.permissions.push({ title: cx.params.title, subject: cx.params.subject?.type,
                           options: cx.params.options.map((o) => o.kind) });
    const allow = cx.params.options.find((o) => o.kind.startsWith("allow"));
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  });

async function step(cx, name, method, params) {
  try {
    out.steps[name] = await cx.request(method, params);
  } catch (err) {
    out.steps[name] = { error: { code: err.code, message: String(err.message ?? err) } };
  }
  return out.steps[name];
}

async function prompt(cx, name, sessionId, text, onChunk) {
  turn = { kinds: [], text: "", idle: null };
  out.turns[name] = turn;
  const idle = new Promise((resolve) => { waiting = { done: resolve, onChunk }; });
  const ack = await step(cx, name, "session/prompt", { sessionId, prompt: [{ type: "text", text }] });
  if (!ack.error) await idle;
  waiting = null;
}

const result = await app.connectWith(stream, async (cx) => {
  await step(cx, "initialize", "initialize", {
    protocolVersion: v2.PROTOCOL_VERSION, info: { name: "acpgate-tier-v2", version: "1" },
    capabilities: {},
  });
  const session = await step(cx, "session/new", "session/new", { cwd });
  const sessionId = session.sessionId;
  out.sessionId = sessionId;
  if (modeValue !== "-") {
    const option = (session.configOptions ?? []).find((o) => o.category === "mode");
    await step(cx, "set mode", "session/set_config_option", {
      sessionId, configId: option?.configId ?? "mode", type: "id", value: modeValue });
  }
  await prompt(cx, "prompt hello", sessionId, "hello");
  await prompt(cx, "prompt tool", sessionId, toolPrompt);
  let cancelled = false;
  await prompt(cx, "prompt cancelled", sessionId, slowPrompt, () => {
    if (cancelled) return;
    cancelled = true;
    cx.notify("session/cancel", { sessionId });
  });
  await step(cx, "session/close", "session/close", { sessionId });
  return out;
});
child.stdin.end();
console.log(JSON.stringify(result));
process.exit(0);
