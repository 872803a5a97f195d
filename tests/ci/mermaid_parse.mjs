// Parse Mermaid text from stdin with the mermaid package (under jsdom); exit 1 on a parse error.
// Run by tests/ci/test_counterexample.py when MERMAID_NODE_MODULES points at an npm install
// of mermaid and jsdom (see docs/ci.md).
import { JSDOM } from "jsdom";
const dom = new JSDOM("<!DOCTYPE html><body></body>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
let text = "";
for await (const chunk of process.stdin) text += chunk;
try {
  await mermaid.parse(text);
  console.log("ok");
} catch (error) {
  console.error(String(error && error.message || error));
  process.exit(1);
}
