// The published reference (OpenClaw's session-state modules) behind the conformance kit's
// adapter protocol (docs/conformance.md). Written for this project; it imports the installed
// package's compiled modules at run time and copies none of them.
//
//   node adapter.mjs --package DIR --work DIR
//
// DIR of --package is the installed package (its dist/ and docs/); --work is a directory inside
// the cache where each run's state, logs and lock files go (removed at `bye`). The caller
// points HOME and TMPDIR into it too (sessionstate/conformance/openclaw_install.py does).
// One process serves the whole kit run (loading the reference takes seconds): `fresh` moves to
// a new state directory with empty queues; `restart` drops the in-memory queue, reopens the
// databases and runs the startup sweep. One thing a real restart loses is kept: a wake the
// reference's wake singleton holds at the restart still fires (its own 20 s later).
import { createInterface } from "node:readline";
import { readdirSync, readFileSync, mkdirSync, rmSync, mkdtempSync, cpSync, existsSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { randomUUID } from "node:crypto";

const PINNED = "2026.9.6";
const args = process.argv.slice(2);
const option = (name) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : undefined;
};
const packageDir = option("--package") ?? process.env.SESSIONSTATE_OPENCLAW_PACKAGE;
const workDir = option("--work");
if (!packageDir || !workDir) {
  process.stderr.write("adapter.mjs: --package DIR and --work DIR are required\n");
  process.exit(2);
}

// -- the reference's modules, found by file prefix and mapped by their export line ------------

function exportMap(text) {
  // `export { longName as x, other as y, plain };` -> { longName: "x", other: "y", plain: "plain" }
  const found = /export\s*\{([^}]*)\}\s*;?\s*$/.exec(text.trimEnd());
  const names = {};
  if (!found) return names;
  for (const part of found[1].split(",")) {
    const words = part.trim().split(/\s+as\s+/);
    if (words[0]) names[words[0]] = words[1] ?? words[0];
  }
  return names;
}

async function load(prefix, wanted) {
  const dist = join(packageDir, "dist");
  const candidates = readdirSync(dist).filter((f) => f.startsWith(prefix + "-") && f.endsWith(".mjs")
    && /^[A-Za-z0-9_-]+$/.test(f.slice(prefix.length + 1, -4)));
  for (const file of candidates.sort()) {
    const names = exportMap(readFileSync(join(dist, file), "utf8"));
    if (!wanted.every((name) => name in names)) continue;
    const module = await import(pathToFileURL(join(dist, file)).href);
    return Object.fromEntries(wanted.map((name) => [name, module[names[name]]]));
  }
  throw new Error(`no dist/${prefix}-*.mjs exports all of ${wanted.join(", ")}`);
}

function docClaims() {
  // The reference's own words for the rules the kit may find it breaking (read from its docs).
  const claims = {};
  try {
    const text = readFileSync(join(packageDir, "docs", "concepts", "session-state.md"), "utf8");
    const sentence = text.split("\n").flatMap((line) => line.split(/(?<=\.)\s+/))
      .find((s) => /woken immediately/.test(s));
    if (sentence) claims.R12 = { source: `openclaw ${PINNED} docs/concepts/session-state.md`, quote: sentence.trim() };
  } catch { /* no docs: no claims */ }
  return claims;
}

// -- the reference, served --------------------------------------------------------------------

async function engineMain() {
  // The kit's clock. Date.now is the kit's time; performance.now moves forward with every step
  // of it (never back: a `fresh` that starts the clock over leaves it where it is), so the
  // reference's wake timers see the kit's time pass.
  const realDateNow = Date.now.bind(Date);
  const realPerfNow = performance.now.bind(performance);
  let offset = 0;
  let perfOffset = 0;
  Date.now = () => realDateNow() + offset;
  performance.now = () => realPerfNow() + perfOffset;
  const setClock = (seconds, { fresh = false } = {}) => {
    const next = seconds * 1000 - realDateNow();
    if (!fresh) perfOffset += Math.max(0, next - offset);
    offset = next;
  };

  mkdirSync(workDir, { recursive: true });
  // A run's directory is named by its process; one left by a process that is gone is removed.
  for (const name of readdirSync(workDir)) {
    const pid = Number(/^run-(\d+)-/.exec(name)?.[1]);
    if (!pid || pid === process.pid) continue;
    try { process.kill(pid, 0); } catch { rmSync(join(workDir, name), { recursive: true, force: true }); }
  }
  const run = mkdtempSync(join(workDir, `run-${process.pid}-`));
  for (const dir of ["logs", "locks"]) mkdirSync(join(run, dir), { recursive: true });
  const logger = await load("logger", ["setLoggerOverride"]);
  logger.setLoggerOverride({ level: "info", file: join(run, "logs", "openclaw.log") });

  const events = await load("session-state-events", [
    "recordSessionStateEvent", "registerSessionStateWatch", "listSessionStateEventsSince",
    "acknowledgeSessionStateNotices", "sweepSessionStateWatchNotices", "getSessionStateVersion",
    "handleSessionStateSessionReset", "handleSessionStateSessionDeleted", "recordSubagentSpawned",
    "recordSessionHumanDirectMessage", "decodeSessionStateNoticeContextKey"]);
  const kernel = await load("session-upstream-links.kernel", ["pruneSessionStateEventsInDatabase"]);
  const stateDb = await load("openclaw-state-db", ["runOpenClawStateWriteTransaction"]);
  const queue = await load("system-events", ["peekSystemEventEntries", "consumeSelectedSystemEventEntries"]);
  const wake = await load("heartbeat-wake", ["setHeartbeatWakeHandler"]);
  const created = await load("session-created", ["recordSessionCreated"]);
  const accessor = await load("session-accessor.sqlite-entry", [
    "publishSystemEventStoreConfig", "replaceSessionEntrySync", "loadSessionEntryReadOnly"]);

  const coordinator = await load("sqlite-source-handle", ["withStateDatabaseCoordinatorRuntimeDirectory"]);
  const stateCache = await load("openclaw-state-db-cache", ["closeOpenClawStateDatabase"]);
  const agentDb = await load("openclaw-agent-db", ["closeOpenClawAgentDatabases"]);
  const queueReset = await load("system-events", ["resetSystemEventsForTest"]);

  const cfg = {};
  let stateDir = null;
  let runs = 0;
  const woken = [];
  const handler = async (request) => {
    if (process.env.SESSIONSTATE_OPENCLAW_DEBUG) process.stderr.write(`wake ${JSON.stringify(request)}\n`);
    // A wake for a store of an earlier `fresh` (another state directory) is not this run's.
    if (request.sessionStorePath && !request.sessionStorePath.startsWith(stateDir)) return { status: "ran" };
    woken.push([request.sessionKey ?? "", request.reason ?? ""]);
    return { status: "ran" };
  };
  const agentOf = (key) => /^agent:([^:]+):/.exec(key)?.[1];
  const entryOf = (key) => accessor.loadSessionEntryReadOnly({ sessionKey: key });
  const settle = () => new Promise((done) => setTimeout(done, 5));

  const createSession = (key, entry) => {
    const full = { sessionId: randomUUID(), updatedAt: Date.now(), ...entry };
    accessor.replaceSessionEntrySync({ sessionKey: key }, full);
    created.recordSessionCreated(cfg, { sessionKey: key, agentId: agentOf(key), entry: full });
  };

  // The real gateway's start-up order: the store resolver, the wake handler, the sweep.
  const boot = (sweep) => {
    stateCache.closeOpenClawStateDatabase();
    agentDb.closeOpenClawAgentDatabases();
    queueReset.resetSystemEventsForTest();  // the queue lives in memory: a new process starts empty
    accessor.publishSystemEventStoreConfig(cfg);
    wake.setHeartbeatWakeHandler(handler);
    if (sweep) events.sweepSessionStateWatchNotices();
  };
  const sessions = new Set();
  const anyQueued = () => [...sessions].some((key) => !key.includes(":subagent:") && queue.peekSystemEventEntries(key).length);

  const ops = {
    hello: () => ({ implementation: `openclaw ${PINNED} (session-state modules, Node ${process.versions.node})`,
                    recordsCreated: true, announces: true, claims: docClaims() }),
    fresh: (r) => {
      setClock(Number(r.now), { fresh: true });
      stateDir = join(run, `state-${++runs}`);
      // An empty state directory: the first run's, copied before anything was recorded (the
      // reference builds its schema on first open, which takes about a second).
      const template = join(run, "template");
      if (existsSync(template)) cpSync(template, stateDir, { recursive: true });
      else mkdirSync(stateDir, { recursive: true });
      process.env.OPENCLAW_STATE_DIR = stateDir;
      process.env.OPENCLAW_CONFIG_PATH = join(stateDir, "openclaw.json");
      sessions.clear();
      woken.splice(0);
      // A new process: its startup sweep also prunes, which sets the reference's in-memory
      // last-prune time (otherwise carried over from the previous run) to the new clock.
      boot(true);
      if (!existsSync(template)) {
        events.getSessionStateVersion("agent:a:main", "a");  // opens the database: its schema
        stateCache.closeOpenClawStateDatabase();
        agentDb.closeOpenClawAgentDatabases();
        cpSync(stateDir, template, { recursive: true });
      }
      return {};
    },
    restart: () => { boot(true); return {}; },
    clock: async (r) => {
      setClock(Number(r.now));
      wake.setHeartbeatWakeHandler(handler);  // pending wakes are rescheduled on the new clock
      if (anyQueued()) await new Promise((done) => setTimeout(done, 400));  // its reschedule waits 250 ms
      return {};
    },
    create: (r) => { sessions.add(r.key); createSession(r.key, { createdActor: { type: "human" } }); return {}; },
    spawn: (r) => {
      sessions.add(r.child);
      createSession(r.child, { spawnedBy: r.parent, parentSessionKey: r.parent,
                               createdActor: { type: "agent", id: r.parent } });
      events.recordSubagentSpawned({ childSessionKey: r.child, agentId: agentOf(r.child),
                                     requesterSessionKey: r.parent, childRunId: r.runId });
      return {};
    },
    record: (r) => {
      // As the reference's producers do: the spawn parent is named as the event's watcher.
      const parent = entryOf(r.session)?.spawnedBy;
      const row = events.recordSessionStateEvent({
        sessionKey: r.session, agentId: agentOf(r.session), kind: r.kind, actorType: r.actorType,
        ...(r.actorId ? { actorId: r.actorId } : {}), summary: r.summary ?? "",
        ...(r.dedupeKey ? { dedupeKey: r.dedupeKey } : {}),
        ...(parent ? { watcherSessionKeys: [parent] } : {}),
      });
      return { sequence: row?.sequence ?? null };
    },
    human: (r) => {
      const row = events.recordSessionHumanDirectMessage({
        sessionKey: r.session, agentId: agentOf(r.session), entry: entryOf(r.session),
        actor: { actorType: "human" }, channel: "conformance" });
      return { sequence: row?.sequence ?? null };
    },
    watch: (r) => ({ watched: events.registerSessionStateWatch({ watcherSessionKey: r.watcher, targetSessionKey: r.target }) }),
    // The turn's drain: peek, consume what was peeked, acknowledge the notices' targets.
    drain: (r) => {
      const entries = queue.peekSystemEventEntries(r.watcher);
      queue.consumeSelectedSystemEventEntries(r.watcher, entries);
      const targets = entries.map((e) => e.contextKey && events.decodeSessionStateNoticeContextKey(e.contextKey)).filter(Boolean);
      if (targets.length) events.acknowledgeSessionStateNotices(r.watcher, targets);
      return { lines: entries.map((e) => e.text) };
    },
    pending: (r) => ({ lines: queue.peekSystemEventEntries(r.watcher).map((e) => e.text) }),
    changesSince: (r) => {
      const answer = events.listSessionStateEventsSince(r.session, agentOf(r.session), Number(r.since), 200);
      return { stateVersion: events.getSessionStateVersion(r.session, agentOf(r.session)),
               historyGap: answer.historyGap, truncated: answer.truncated,
               events: answer.events.map((e) => ({ sequence: e.sequence, kind: e.kind, actorType: e.actorType })) };
    },
    version: (r) => ({ stateVersion: events.getSessionStateVersion(r.session, agentOf(r.session)) }),
    reset: (r) => {
      // A reset starts a new incarnation of the session (a new session id) and clears its watches.
      const entry = entryOf(r.session) ?? {};
      accessor.replaceSessionEntrySync({ sessionKey: r.session }, { ...entry, sessionId: randomUUID(), updatedAt: Date.now() });
      events.handleSessionStateSessionReset(r.session);
      return {};
    },
    delete: (r) => { events.handleSessionStateSessionDeleted(r.session, agentOf(r.session)); return {}; },
    prune: () => {
      stateDb.runOpenClawStateWriteTransaction(({ db }) => kernel.pruneSessionStateEventsInDatabase(db, Date.now()));
      return {};
    },
    wakes: async () => { await settle(); return { wakes: woken.splice(0) }; },
    // benchmarks/reference_side_by_side.py: each step [op, arguments, label] through the ops
    // above, timed here by a monotonic nanosecond clock (performance.now is the kit's clock).
    bench: async (r) => {
      const ns = {}, count = {}, sequences = [];
      for (const [name, stepArgs, label] of r.steps) {
        const fn = ops[name];
        if (!fn || ["bench", "bye", "hello", "fresh"].includes(name)) throw new Error(`bench cannot time ${name}`);
        const began = process.hrtime.bigint();
        let out = fn(stepArgs);
        if (out instanceof Promise) out = await out;
        const took = Number(process.hrtime.bigint() - began);
        ns[label] = (ns[label] ?? 0) + took;
        count[label] = (count[label] ?? 0) + 1;
        if (name === "record" || name === "human") sequences.push(out?.sequence ?? null);
      }
      return { ns, count, sequences };
    },
  };

  const serve = async () => {
    const input = createInterface({ input: process.stdin });
    for await (const line of input) {
      if (!line.trim()) continue;
      const request = JSON.parse(line);
      let answer;
      try {
        const fn = request.op === "bye" ? () => ({}) : ops[request.op];
        if (!fn) throw new Error(`unknown op ${request.op}`);
        if (!stateDir && !["hello", "fresh", "bye"].includes(request.op)) throw new Error("no implementation: send fresh first");
        answer = { id: request.id, ok: true, result: await fn(request) };
      } catch (error) {
        answer = { id: request.id, ok: false, error: String(error?.stack ?? error) };
      }
      process.stdout.write(JSON.stringify(answer) + "\n");
      if (request.op === "bye") break;
    }
    stateCache.closeOpenClawStateDatabase();
    agentDb.closeOpenClawAgentDatabases();
  };
  // Lock files go to the run's directory, not the system's /tmp.
  await coordinator.withStateDatabaseCoordinatorRuntimeDirectory({ directory: join(run, "locks"), keepAlive: true }, serve);
  rmSync(run, { recursive: true, force: true });
  process.exit(0);
}

await engineMain();
