// A client built only on the official ACP TypeScript SDK (@agentclientprotocol/sdk), over its
// experimental remote transports: `experimental/http-client` (Streamable HTTP) or
// `experimental/ws-client` (WebSocket). It imports no acpgate code.
//
//   node ts_remote_client.mjs <sdk dir> <http|ws> <url> <token> <cwd>
//
// One connection runs initialize, session/new, a prompt whose shell tool asks permission
// (answered with the first allow option), a second prompt cancelled while its permission is
// pending, session/list and session/close; a second connection loads the session, prompts
// it and closes it. Prints one JSON line.
import path from "node:path";

const [sdkDir, mode, url, token, cwd] = process.argv.slice(2);
const dist = path.join(sdkDir, "node_modules/@agentclientprotocol/sdk/dist");
const sdk = await import(path.join(dist, "v1/stable/acp.js"));

async function stream() {
  if (mode === "http") {
    const { createHttpStream } = await import(path.join(dist, "transports/http-stream.js"));
    return createHttpStream(url, { headers: { Authorization: `Bearer ${token}` } });
  }
  const { createWebSocketStream } = await import(path.join(dist, "transports/ws-stream.js"));
  // Node 20's WebSocket (undici) sends no custom headers: the token goes as a subprotocol.
  return createWebSocketStream(url, { protocols: [`bearer.${token}`] });
}

function clientApp(state) {
  return sdk.client()
    .onNotification("session/update", (cx) => { state.updates.push(cx.params.update); })
    .onRequest("session/request_permission", async (cx) => {
      state.permissions.push(cx.params.toolCall?.title ?? "");
      if (state.hold) {
        // Keep this one pending: the test cancels the turn while the client is being asked.
        state.asked();
        return await new Promise((resolve) => { state.release = resolve; });
      }
      const allow = cx.params.options.find((o) => o.kind.startsWith("allow"));
      return { outcome: { outcome: "selected", optionId: allow.optionId } };
    });
}

const text = (updates) => updates.filter((u) => u.sessionUpdate === "agent_message_chunk")
  .map((u) => u.content.text).join("");

const first = { updates: [], permissions: [], hold: false };
const out = await clientApp(first).connectWith(await stream(), async (cx) => {
  const init = await cx.request("initialize", {
    protocolVersion: sdk.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: "ts-remote-client", version: "1" },
  });
  const session = await cx.request("session/new", { cwd, mcpServers: [] });
  const sessionId = session.sessionId;
  const prompt = await cx.request("session/prompt", {
    sessionId, prompt: [{ type: "text", text: "!echo ts-remote-ok" }],
  });
  const said = text(first.updates);
  // A turn cancelled while its permission request waits for this client.
  first.hold = true;
  const asked = new Promise((resolve) => { first.asked = resolve; });
  const pending = cx.request("session/prompt", {
    sessionId, prompt: [{ type: "text", text: "!sleep 30" }],
  });
  await asked;
  await cx.notify("session/cancel", { sessionId });
  const cancelled = await pending;
  first.release?.({ outcome: { outcome: "cancelled" } });
  const listed = await cx.request("session/list", {});
  await cx.request("session/close", { sessionId });
  return {
    protocolVersion: init.protocolVersion, agentName: init.agentInfo?.name,
    loadSession: init.agentCapabilities?.loadSession, sessionId,
    stopReason: prompt.stopReason, cancelled: cancelled.stopReason, text: said,
    permissions: first.permissions, listed: listed.sessions.map((s) => s.sessionId),
  };
});

const second = { updates: [], permissions: [], hold: false };
out.reload = await clientApp(second).connectWith(await stream(), async (cx) => {
  await cx.request("initialize", { protocolVersion: sdk.PROTOCOL_VERSION, clientCapabilities: {} });
  await cx.request("session/load", { sessionId: out.sessionId, cwd, mcpServers: [] });
  const replayed = second.updates.length;
  const again = await cx.request("session/prompt", {
    sessionId: out.sessionId, prompt: [{ type: "text", text: "after the reload" }],
  });
  await cx.request("session/close", { sessionId: out.sessionId });
  return { replayed, stopReason: again.stopReason, text: text(second.updates) };
});
console.log(JSON.stringify(out));
process.exit(0);
