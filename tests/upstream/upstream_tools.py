"""The real Codex, OpenCode and Pi, driven offline to write the sessions the providers read.

Each driver writes with the tool's own code, in a private home under the test's tmp directory:

* Codex: a second ``codex app-server`` (the provider has its own) with a model provider whose
  address is a closed local port: ``turn/start`` records the user message in the rollout, the
  model request fails at once, ``turn/interrupt`` ends the turn. No network, no model.
* OpenCode: ``opencode --pure import`` of the session's export document (the document grows one
  message at a time, each import upserts), ``opencode session delete``.
* Pi: Pi's own ``SessionManager`` under Node (``pi_writer.mjs``).

Where ``unshare -n`` works (root, or user namespaces), every tool process runs in a network
namespace of its own, with no interface up: the tools cannot reach the network even if they try
(Codex looks a name up at start). The tools come from ``sessionstate.upstream.tools_install``
(npm, cached). Without them the tests
skip; ``SESSIONSTATE_REQUIRE_UPSTREAM_TOOLS=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from sessionstate.upstream.providers import CodexAppServerProvider, OpenCodeProvider, PiSessionProvider
from sessionstate.upstream.providers.codex_rpc import AppServerClient, RpcError
from sessionstate.upstream.tools_install import missing_tools, tool_path

REQUIRE_ENV = "SESSIONSTATE_REQUIRE_UPSTREAM_TOOLS"
OFFLINE_MODEL = [
    "-c", 'model_providers.offline={name="offline",base_url="http://127.0.0.1:9/v1",wire_api="responses",'
          "request_max_retries=0,stream_max_retries=0}",
    "-c", 'model_provider="offline"',
]


def require_tool(name: str) -> None:
    reason = missing_tools().get(name)
    if reason is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
    pytest.skip(reason)


@functools.cache
def _can_unshare() -> bool:
    unshare = shutil.which("unshare")
    return unshare is not None and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0


def offline(executable: str, home: Path) -> str:
    """``executable``, or a wrapper that runs it without network (see the module docstring)."""
    if not _can_unshare():
        return executable
    wrapper = home / f"offline-{Path(executable).name}"
    wrapper.write_text(f'#!/bin/sh\nexec unshare -n "{executable}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def private_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("XDG_", "CODEX_", "PI_", "OPENCODE"))}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"), XDG_CONFIG_HOME=str(home / "config"),
               XDG_CACHE_HOME=str(home / "cache"), XDG_STATE_HOME=str(home / "state"))
    return env


class CodexDriver:
    window_loses = True  # two pages of ``window`` turns are read: a longer burst is flagged

    def __init__(self, tmp: Path) -> None:
        require_tool("codex")
        self.home = tmp / "codex-home"
        self.env = private_env(self.home) | {"CODEX_HOME": str(self.home)}
        self.codex = offline(str(tool_path("codex")), self.home)
        self.writer = AppServerClient([self.codex, "app-server", *OFFLINE_MODEL], env=self.env, timeout=60)
        self.paths: dict[str, Path] = {}
        self.open_turn: dict[str, str] = {}

    def provider(self, window: int | None = None) -> CodexAppServerProvider:
        client = AppServerClient([self.codex, "app-server"], env=self.env, timeout=60)
        return CodexAppServerProvider(client, page_size=window or 100, max_pages=2 if window else 10)

    def new_thread(self) -> str:
        thread = self.writer.call("thread/start", {"cwd": str(self.home)})["thread"]
        self.paths[thread["id"]] = Path(thread["path"])
        self.human(thread["id"], "history before adoption")
        return str(thread["id"])

    def human(self, thread: str, text: str, *, keep_open: bool = False) -> None:
        turn = self.writer.call("turn/start", {"threadId": thread, "input": [{"type": "text", "text": text}]})["turn"]
        if keep_open:
            self.open_turn[thread] = turn["id"]
            deadline = time.monotonic() + 30
            while self._on_disk(thread, turn["id"])[1] < 1:
                assert time.monotonic() < deadline, "the Codex user message never reached the rollout"
                time.sleep(0.02)
        else:
            self._end(thread, turn["id"])

    def humans(self, thread: str, texts: list[str]) -> None:
        for text in texts:
            self.human(thread, text)

    def steer(self, thread: str, text: str) -> None:
        turn = self.open_turn.pop(thread)
        self.writer.call("turn/steer", {"threadId": thread, "expectedTurnId": turn,
                                        "input": [{"type": "text", "text": text}]})
        self._end(thread, turn)

    def non_human(self, thread: str) -> None:
        # Items injected into the model-visible history (what a tool or the gateway adds): no turn.
        self.writer.call("thread/inject_items", {"threadId": thread, "items": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "noted"}]},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be brief"}]}]})

    def delete(self, thread: str) -> None:
        self.paths[thread].unlink()

    def close(self) -> None:
        self.writer.close()

    def _end(self, thread: str, turn: str) -> None:
        """Interrupt ``turn`` until Codex lists it as ended (its model request cannot succeed)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status, messages = self._status(thread, turn)
            if status in ("completed", "interrupted", "failed") and self._on_disk(thread, turn)[0]:
                return
            if not messages:  # interrupted before its message is recorded, the turn would have none
                time.sleep(0.02)
                continue
            try:
                self.writer.call("turn/interrupt", {"threadId": thread, "turnId": turn})
            except RpcError:  # its task has not started yet
                pass
            time.sleep(0.02)
        raise AssertionError(f"the Codex turn {turn} did not end")

    def _on_disk(self, thread: str, turn: str) -> tuple[bool, int]:
        """What the rollout file (what the provider's own app server reads) records of ``turn``:
        whether it ended, and how many user messages it has."""
        ended, messages = False, 0
        if not self.paths[thread].exists():  # written from the thread's first turn on
            return ended, messages
        for line in self.paths[thread].read_text(encoding="utf-8").splitlines():
            payload = json.loads(line).get("payload") or {}
            if payload.get("turn_id") != turn:
                continue
            ended = ended or payload.get("type") in ("turn_aborted", "task_complete")
            messages += payload.get("type") == "item_completed" and (payload.get("item") or {}).get("type") == "UserMessage"
        return ended, messages

    def _status(self, thread: str, turn: str) -> tuple[str | None, int]:
        try:
            page = self.writer.call("thread/turns/list", {"threadId": thread, "limit": 5, "itemsView": "full"})
        except RpcError:  # "not supported yet": the new thread's rollout is still being written
            return None, 0
        for listed in page["data"]:
            if listed["id"] == turn:
                return listed["status"], sum(1 for item in listed["items"] if item["type"] == "userMessage")
        return None, 0


class OpenCodeDriver:
    window_loses = False  # the export holds every message

    def __init__(self, tmp: Path) -> None:
        require_tool("opencode")
        self.home = tmp / "opencode-home"
        self.env = private_env(self.home)
        self.opencode = offline(str(tool_path("opencode")), self.home)
        self.documents: dict[str, dict[str, Any]] = {}
        self.clock = int(time.time() * 1000) - 60_000
        self.count = 0

    def provider(self, window: int | None = None) -> OpenCodeProvider:
        return OpenCodeProvider(self.opencode, env=self.env, batch_seconds=0.0)

    def _id(self, prefix: str) -> str:
        self.count += 1
        self.clock += 1
        return f"{prefix}_{self.clock:012x}{self.count:014d}"

    def new_thread(self) -> str:
        session = self._id("ses")
        self.documents[session] = {"info": {"id": session, "slug": "quiet-otter", "projectID": "global",
                                            "directory": str(self.home), "title": "adopted", "version": "1.18.33",
                                            "time": {"created": self.clock, "updated": self.clock}},
                                   "messages": []}
        self.human(session, "history before adoption")
        return session

    def message(self, session: str, role: str, parts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        message_id = self._id("msg")
        info: dict[str, Any] = {"id": message_id, "sessionID": session, "role": role, "time": {"created": self.clock}}
        if role == "user":
            info |= {"agent": "build", "model": {"providerID": "none", "modelID": "none"}}
        else:
            info |= {"time": {"created": self.clock, "completed": self.clock}, "parentID": message_id,
                     "modelID": "none", "providerID": "none", "mode": "build", "agent": "build",
                     "path": {"cwd": str(self.home), "root": str(self.home)}, "cost": 0,
                     "tokens": {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}}
        full = [{"id": self._id("prt"), "sessionID": session, "messageID": message_id, **p} for p in parts]
        return {"info": info | extra, "parts": full}

    def write(self, session: str, *messages: dict[str, Any]) -> None:
        document = self.documents[session]
        document["messages"].extend(messages)
        document["info"]["time"]["updated"] = self.clock
        path = self.home / f"{session}.json"
        path.write_text(json.dumps(document))
        subprocess.run([self.opencode, "--pure", "import", str(path)], env=self.env, check=True,
                       capture_output=True, cwd=self.home, timeout=120)

    def human(self, session: str, text: str) -> None:
        self.write(session, self.message(session, "user", [{"type": "text", "text": text}]),
                   self.message(session, "assistant", [{"type": "text", "text": "ok"}]))

    def humans(self, session: str, texts: list[str]) -> None:
        self.write(session, *(self.message(session, "user", [{"type": "text", "text": t}]) for t in texts))

    def non_human(self, session: str) -> None:
        earlier = next(m for m in self.documents[session]["messages"] if m["info"]["role"] == "user")
        mention = {"type": "file", "mime": "text/plain", "filename": "a.py", "url": "file:///a.py",
                   "source": {"type": "file", "path": "a.py", "text": {"value": "@a.py", "start": 0, "end": 5}}}
        self.write(
            session,
            self.message(session, "assistant", [{"type": "text", "text": "thinking aloud"}]),
            self.message(session, "user", [{"type": "text", "text": "The following tool was executed by the user",
                                             "synthetic": True}]),
            self.message(session, "user", [{"type": "text", "text": "The following tool was executed by the user"}]),
            self.message(session, "user", [{"type": "compaction", "auto": True}]),
            self.message(session, "user", [{"type": "text", "text": "Continue if you have next steps",
                                             "metadata": {"compaction_continue": True}}]),
            self.message(session, "user", [{"type": "text", "text": "@a.py"}, mention]),
            self.message(session, "user", [{"type": "text", "text": "hidden", "ignored": True}]),
            self.message(session, "user", [{"type": "text", "text": earlier["parts"][0]["text"]}]),
        )

    def delete(self, session: str) -> None:
        subprocess.run([self.opencode, "session", "delete", session], env=self.env, check=True,
                       capture_output=True, cwd=self.home, timeout=120)

    def close(self) -> None:
        pass


class PiDriver:
    window_loses = False  # the window is bytes per check: a longer burst takes more checks

    def __init__(self, tmp: Path) -> None:
        require_tool("pi")
        self.home = tmp / "pi-home"
        self.env = private_env(self.home) | {"PI_CODING_AGENT_DIR": str(self.home / "agent")}
        self.cwd = str(self.home / "project")
        node = shutil.which("node")
        assert node is not None
        node = offline(node, self.home)
        self.process = subprocess.Popen(
            [node, str(Path(__file__).with_name("pi_writer.mjs")), str(tool_path("pi"))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env, text=True, cwd=self.home)
        self.files: dict[str, Path] = {}

    def call(self, **command: Any) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        if "error" in answer:
            raise AssertionError(answer["error"])
        return answer["ok"]

    def provider(self, window: int | None = None) -> PiSessionProvider:
        return PiSessionProvider(env=self.env, cwd=self.cwd, scan_cap_bytes=window or 1024 * 1024)

    def new_thread(self) -> str:
        created = self.call(op="create", cwd=self.cwd)
        self.call(op="user", id=created["id"], content="history before adoption")
        self.call(op="assistant", id=created["id"], text="ok")  # Pi writes the file from the first answer on
        self.files[created["id"]] = Path(created["file"])
        return str(created["id"])

    def human(self, session: str, text: str) -> None:
        self.call(op="user", id=session, content=text)

    def humans(self, session: str, texts: list[str]) -> None:
        for text in texts:
            self.human(session, text)

    def non_human(self, session: str) -> None:
        self.call(op="assistant", id=session, text="working on it")
        self.call(op="bash", id=session, command="ls")
        self.call(op="thinking", id=session)

    def delete(self, session: str) -> None:
        self.files[session].unlink()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


DRIVERS = {"codex": CodexDriver, "opencode": OpenCodeDriver, "pi": PiDriver}
