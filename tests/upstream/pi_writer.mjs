// Writes Pi sessions with Pi's own SessionManager (no model, no network), one JSON command per
// stdin line, one JSON answer per stdout line. argv[2]: the installed package's dist/index.js.
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const { SessionManager } = await import(pathToFileURL(process.argv[2]).href);
const sessions = new Map();
const usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0,
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } };

function handle(command) {
  if (command.op === "create") {
    const manager = SessionManager.create(command.cwd);
    const id = manager.getSessionId();
    sessions.set(id, manager);
    return { id, file: manager.getSessionFile() };
  }
  const manager = sessions.get(command.id);
  const now = Date.now();
  if (command.op === "user") {
    return { entry: manager.appendMessage({ role: "user", content: command.content, timestamp: now }) };
  }
  if (command.op === "assistant") {
    return { entry: manager.appendMessage({ role: "assistant", content: [{ type: "text", text: command.text }],
      api: "none", provider: "none", model: "none", usage, stopReason: "stop", timestamp: now }) };
  }
  if (command.op === "bash") {
    return { entry: manager.appendMessage({ role: "bashExecution", command: command.command, output: "ok",
      exitCode: 0, cancelled: false, truncated: false, timestamp: now }) };
  }
  if (command.op === "thinking") {
    return { entry: manager.appendThinkingLevelChange("high") };
  }
  throw new Error(`unknown op ${command.op}`);
}

for await (const line of createInterface({ input: process.stdin })) {
  try {
    process.stdout.write(JSON.stringify({ ok: handle(JSON.parse(line)) }) + "\n");
  } catch (error) {
    process.stdout.write(JSON.stringify({ error: String(error) }) + "\n");
  }
}
