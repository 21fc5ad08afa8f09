// A JSON-RPC 2.0 client of the gateway's /acp over a WebSocket (ACP, one message a frame).
//
// Browsers cannot set an Authorization header on a WebSocket, so the token travels the way
// the gateway accepts it from a browser: as a `bearer.<token>` entry of the
// Sec-WebSocket-Protocol offer, next to acpgate's own subprotocol (which the gateway picks,
// so the token is never echoed back). Never in the URL, never logged.

const SUBPROTOCOL = "zeroclaw.acp.v1";

/** The ws(s):// URL of this gateway's /acp, beside the page (same path prefix). */
export function acpUrl(location) {
  const url = new URL("acp", location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  url.search = "";
  url.hash = "";
  return url.href;
}

export class RpcError extends Error {
  constructor(error) {
    super(typeof error?.message === "string" ? error.message : "error");
    this.code = error?.code;
    this.data = error?.data;
  }
}

export class AcpClient {
  constructor(url, token) {
    this.url = url;
    this.token = token;
    this.nextId = 1;
    this.pending = new Map();
    this.onNotification = () => {};
    this.onRequest = async () => { throw new RpcError({ code: -32601, message: "Method not found" }); };
    this.onClose = () => {};
    this.ws = null;
  }

  /** Opens the WebSocket; rejects when the gateway refuses it (wrong token, origin). */
  connect() {
    return new Promise((resolve, reject) => {
      let opened = false;
      const ws = new WebSocket(this.url, [SUBPROTOCOL, "bearer." + this.token]);
      this.ws = ws;
      ws.addEventListener("open", () => { opened = true; resolve(); });
      ws.addEventListener("message", (ev) => this._receive(ev.data));
      ws.addEventListener("close", (ev) => {
        for (const { reject: fail } of this.pending.values()) {
          fail(new RpcError({ code: -32099, message: "connection closed" }));
        }
        this.pending.clear();
        if (!opened) {
          reject(new Error("The gateway refused the connection: check the token " +
                           "(or the page's origin, [gateway] allowed_origins)."));
        } else {
          this.onClose(ev);
        }
      });
    });
  }

  close() {
    if (this.ws) this.ws.close(1000, "signed out");
  }

  request(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this._send({ jsonrpc: "2.0", id, method, params: params ?? {} });
    });
  }

  notify(method, params) {
    this._send({ jsonrpc: "2.0", method, params: params ?? {} });
  }

  _send(message) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
      throw new RpcError({ code: -32099, message: "not connected" });
    }
    this.ws.send(JSON.stringify(message));
  }

  _receive(data) {
    let message;
    try {
      message = JSON.parse(data);
    } catch {
      return; // not JSON: nothing to answer
    }
    if (message === null || typeof message !== "object") return;
    if ("method" in message) {
      if ("id" in message) this._answer(message);
      else this.onNotification(message.method, message.params ?? {});
      return;
    }
    const waiter = this.pending.get(message.id);
    if (!waiter) return;
    this.pending.delete(message.id);
    if ("error" in message) waiter.reject(new RpcError(message.error));
    else waiter.resolve(message.result);
  }

  async _answer(message) {
    try {
      const result = await this.onRequest(message.method, message.params ?? {}, message.id);
      this._send({ jsonrpc: "2.0", id: message.id, result: result ?? null });
    } catch (err) {
      const error = err instanceof RpcError
        ? { code: err.code ?? -32603, message: err.message }
        : { code: -32603, message: "Internal error" };
      try { this._send({ jsonrpc: "2.0", id: message.id, error }); } catch { /* gone */ }
    }
  }
}
