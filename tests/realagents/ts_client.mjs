// A client built only on the official ACP TypeScript SDK (@agentclientprotocol/sdk),
// driving whatever ACP agent command it is given over stdio: here `acpgate acp` or
// `acpgate bridge` (stdio to the gateway). It imports no acpgate code.
//
//   node ts_client.mjs <cwd> <prompt text> <command> [args...]
//
// The SDK is loaded from $ACPGATE_REAL_ADAPTERS/node_modules (the tier's npm cache).
// It runs initialize, session/new, one prompt (answering a permission request with
// the first allow option), session/list, session/close, and prints one JSON line.
import { spawn } from "node:child_process";
import path from "node:path";
import { Readable, Writable } from "node:stream";

const sdk = await import(path.join(process.env.ACPGATE_REAL_ADAPTERS,
  "node_modules/@agentclientprotocol/sdk/dist/v1/stable/acp.js"));
const [cwd, text, command, ...args] = process.argv.slice(2);
const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const stream = sdk.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

const updates = [];
const permissions = [];
const app = sdk.client()
  .onNotification("session/update", (cx) => { updates.push(cx.params.update); })
  .onRequest("session/request_permission", (cx) => {
    permissions.push(cx.params.toolCall?.title ?? "");
    const allow = cx.params.options.find((o) => o.kind.startsWith("allow"));
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  });

const out = await app.connectWith(stream, async (cx) => {
  const init = await cx.request("initialize", {
    protocolVersion: sdk.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: "ts-sdk-client", version: "1" },
  });
  const session = await cx.request("session/new", { cwd, mcpServers: [] });
  const prompt = await cx.request("session/prompt", {
    sessionId: session.sessionId, prompt: [{ type: "text", text }],
  });
  const listed = await cx.request("session/list", {});
  await cx.request("session/close", { sessionId: session.sessionId });
  let missing = null;
  try {
    await cx.request("session/prompt", { sessionId: session.sessionId, prompt: "x" });
  } catch (err) {
    missing = { code: err.code, message: err.message };
  }
  return {
    protocolVersion: init.protocolVersion,
    agentName: init.agentInfo?.name,
    sessionId: session.sessionId,
    stopReason: prompt.stopReason,
    text: updates.filter((u) => u.sessionUpdate === "agent_message_chunk")
      .map((u) => u.content.text).join(""),
    listed: listed.sessions.map((s) => s.sessionId),
    permissions,
    afterClose: missing,
  };
});
console.log(JSON.stringify(out));
child.stdin.end();
await new Promise((resolve) => child.on("exit", resolve));
