// A v2 client built only on the official ACP TypeScript SDK's `experimental/v2` API
// (@agentclientprotocol/sdk), over stdio (`acpgate acp` as a child process), Streamable HTTP
// or WebSocket. It imports no acpgate code.
//
//   node ts_v2_client.mjs <sdk dir> stdio <config dir> - <cwd>
//   node ts_v2_client.mjs <sdk dir> <http|ws> <url> <token> <cwd>
//
// initialize (v2), session/new, a prompt whose shell tool asks permission (answered with the
// first allow option) run until the idle state_update, session/close. Prints one JSON line.
import path from "node:path";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

const [sdkDir, mode, target, token, cwd] = process.argv.slice(2);
const dist = path.join(sdkDir, "node_modules/@agentclientprotocol/sdk/dist");
const v2 = await import(path.join(dist, "v2/stable/acp.js"));

let child;
async function stream() {
  if (mode === "stdio") {
    child = spawn(process.env.ACPGATE_PYTHON ?? "python3",
      ["-m", "acpgate", "acp", "--config-dir", target], { stdio: ["pipe", "pipe", "inherit"] });
    return v2.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  }
  if (mode === "http") {
    const { createHttpStream } = await import(path.join(dist, "transports/http-stream.js"));
    return createHttpStream(target, { headers: { Authorization: `Bearer ${token}` } });
  }
  const { createWebSocketStream } = await import(path.join(dist, "transports/ws-stream.js"));
  return createWebSocketStream(target, { protocols: [`bearer.${token}`] });
}

const state = { updates: [], permissions: [], idle: null };
let idleSeen;
const idle = new Promise((resolve) => { idleSeen = resolve; });
const app = v2.client()
  .onNotification("session/update", (cx) => {
    const u = cx.params.update;
    state.updates.push(u);
    if (u.sessionUpdate === "state_update" && u.state === "idle" && u.stopReason) idleSeen(u);
  })
  .onRequest("session/request_permission", async (cx) => {
    state.permissions.push({ title: cx.params.title, subject: cx.params.subject?.type });
    const allow = cx.params.options.find((o) => o.kind.startsWith("allow"));
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  });

const out = await app.connectWith(await stream(), async (cx) => {
  const init = await cx.request("initialize", {
    protocolVersion: v2.PROTOCOL_VERSION, info: { name: "ts-v2-client", version: "1" },
    capabilities: {},
  });
  const session = await cx.request("session/new", { cwd });
  const sessionId = session.sessionId;
  const ack = await cx.request("session/prompt", {
    sessionId, prompt: [{ type: "text", text: "!echo ts-v2-ok" }],
  });
  const end = await idle;
  await cx.request("session/close", { sessionId });
  const text = state.updates.filter((u) => u.sessionUpdate === "agent_message_chunk")
    .map((u) => u.content.text).join("");
  return {
    protocolVersion: init.protocolVersion, agentName: init.info?.name,
    messageId: ack.messageId, stopReason: end.stopReason, text,
    echoed: state.updates.some((u) => u.sessionUpdate === "user_message_chunk"
      && u.messageId === ack.messageId),
    permissions: state.permissions, kinds: [...new Set(state.updates.map((u) => u.sessionUpdate))],
    modeOption: (session.configOptions ?? []).some((o) => o.category === "mode"),
  };
});
if (child) child.stdin.end();
console.log(JSON.stringify(out));
process.exit(0);
