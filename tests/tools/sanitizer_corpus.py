"""Real-looking assistant transcripts and exactly what the history view must make of them.

Each entry is ``(id, raw assistant text, expected normalised text)``. The shapes are
the ones agents actually leak: reasoning tags from open-weight models, recalled
memory scaffolding, tool calls written as text by providers without native tool
calling (and cut off mid-payload when the turn hit its token limit), chat-template
control tokens (ASCII and DeepSeek's full-width ones), MiniMax's XML tool calls
and the downgraded "[Tool Call: ...]" blocks written when a transcript is replayed.
"""

from __future__ import annotations

NORMALIZE_CASES: list[tuple[str, str, str]] = [
    (
        "think-block-before-answer",
        "<think>\nThe user wants the deploy status. I should check the ops session first.\n"
        "</think>\n\nThe deploy finished at 14:02 and all checks are green.",
        "The deploy finished at 14:02 and all checks are green.",
    ),
    (
        "thinking-block-mid-text",
        "Short answer: yes.\n<thinking>Is it really yes? The config says retries=3.</thinking>\n"
        "Retries are enabled (3 attempts).",
        "Short answer: yes.\n\nRetries are enabled (3 attempts).",
    ),
    (
        "nested-think-inside-thinking",
        "Hi <thinking>outer <think>inner</think> still outer</thinking> there",
        "Hi there",
    ),
    (
        "nested-same-tag",
        "<think>a <think>b</think> c</think>Visible.",
        "Visible.",
    ),
    (
        "unclosed-think-to-end",
        "Working on it.\n<think>Maybe I should also look at the staging logs and",
        "Working on it.",
    ),
    (
        "orphan-closing-think",
        "Okay, the question is about quotas, let me recall the limits...\n</think>\n\n"
        "The free tier allows 100 requests per minute.",
        "The free tier allows 100 requests per minute.",
    ),
    (
        "thought-and-antthinking-case-insensitive",
        "<THOUGHT>plan</THOUGHT>Step 1 done.<antThinking>should I mention step 2?</antThinking>",
        "Step 1 done.",
    ),
    (
        "relevant-memories-hyphen",
        "<relevant-memories>\n- user prefers metric units\n- timezone Europe/Berlin\n"
        "</relevant-memories>\nIt is 21 °C in Berlin right now.",
        "It is 21 °C in Berlin right now.",
    ),
    (
        "relevant-memories-underscore-with-attrs",
        'Sure.\n<relevant_memories source="vector" k="3">old notes</relevant_memories>\nDone.',
        "Sure.\n\nDone.",
    ),
    (
        "tool-call-closed",
        'Let me check.\n<tool_call>\n{"name": "exec", "arguments": {"cmd": "git status"}}\n'
        "</tool_call>\nThe tree is clean.",
        "Let me check.\n\nThe tree is clean.",
    ),
    (
        "tool-call-truncated-never-closes",
        'I will search the docs.\n<tool_call>\n{"name": "web_search", "arguments": {"query": "asyncio '
        "timeout cancel",
        "I will search the docs.",
    ),
    (
        "tool-call-opening-tag-itself-cut",
        'Fetching the page now. <function_call name="fetch" url="https://exa',
        "Fetching the page now.",
    ),
    (
        "function-calls-with-nested-invokes",
        "Running both.\n<function_calls>\n<invoke name=\"read\">\n<parameter name=\"path\">a.py"
        "</parameter>\n</invoke>\n<invoke name=\"read\">\n<parameter name=\"path\">b.py"
        "</parameter>\n</invoke>\n</function_calls>\nBoth files read.",
        "Running both.\n\nBoth files read.",
    ),
    (
        "tool-calls-plural-containing-tool-call",
        "<tool_calls><tool_call>{\"name\":\"a\"}</tool_call><tool_call>{\"name\":\"b\"}"
        "</tool_call></tool_calls>All queued.",
        "All queued.",
    ),
    (
        "tool-call-inside-think-unclosed-inner",
        "<think>I could emit <tool_call>{\"name\": \"x\"</think>Final: 42",
        "Final: 42",
    ),
    (
        "self-closing-tool-call",
        "Nothing to run <tool_call/> here.",
        "Nothing to run here.",
    ),
    (
        "stray-closing-function-call",
        "}}</function_call>\nThe job was queued.",
        "}}\nThe job was queued.",
    ),
    (
        "minimax-full-block",
        "Searching.\n<minimax:tool_call>\n<invoke name=\"search\">\n<parameter name=\"q\">rust async"
        "</parameter>\n</invoke>\n</minimax:tool_call>\nFound three results.",
        "Searching.\n\nFound three results.",
    ),
    (
        "minimax-malformed-missing-opener",
        'Result:\n<invoke name="search">\n<parameter name="q">x</parameter>\n</invoke>\n'
        "</minimax:tool_call>\nDone.",
        "Result:\n\nDone.",
    ),
    (
        "minimax-stray-tags-only",
        "<minimax:tool_call>\n</minimax:tool_call>Answer: no.</minimax:tool_call>",
        "Answer: no.",
    ),
    (
        "minimax-invoke-truncated",
        'One moment.\n<invoke name="exec">\n<parameter name="cmd">rm -rf /tmp/bu',
        "One moment.",
    ),
    (
        "ascii-control-tokens",
        "<|im_start|>assistant\nHello there!<|im_end|>",
        "Hello there!",
    ),
    (
        "llama3-header",
        "<|start_header_id|>assistant<|end_header_id|>\n\nThe build is green.<|eot_id|>",
        "The build is green.",
    ),
    (
        "bare-assistant-token",
        "<|assistant|>Sure, here it is.<|endoftext|>",
        "Sure, here it is.",
    ),
    (
        "full-width-tokens",
        "<｜Assistant｜>The answer is 7.<｜end▁of▁sentence｜>",
        "The answer is 7.",
    ),
    (
        "mixed-width-tokens",
        "Done<|end｜> and <｜eos|> dusted ＜｜fim▁hole｜＞.",
        "Done and dusted .",
    ),
    (
        "deepseek-tool-call-section",
        "Checking weather.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>weather\n"
        '```json\n{"city": "Oslo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        "Checking weather.",
    ),
    (
        "downgraded-tool-call-with-arguments",
        'Ok.\n[Tool Call: exec (ID: toolu_01A)]\nArguments: {"cmd": "ls -la", "env": {"A": "]"}}\n\n'
        "The listing is above.",
        "Ok.\n\nThe listing is above.",
    ),
    (
        "downgraded-tool-result",
        "I ran the tests.\n[Tool Result for ID toolu_01A]\n12 passed, 0 failed\n",
        "I ran the tests.",
    ),
    (
        "downgraded-call-then-result",
        "[Tool Call: read (ID: t1)]\nArguments: {\"path\": \"a.txt\"}\n"
        "[Tool Result for ID t1]\nhello world",
        "",
    ),
    (
        "historical-context",
        '[Historical context: a different model called tool "exec" with arguments: '
        '{"cmd": ["ls"]}. Do not mimic this format.]\nLet me continue with the migration.',
        "Let me continue with the migration.",
    ),
    (
        "historical-context-unclosed",
        "Continuing.\n[Historical context: a different model called tool \"exec\" with argu",
        "Continuing.",
    ),
    (
        "everything-at-once",
        "<|im_start|>assistant\n<think>plan: call search</think>\n<relevant_memories>x</relevant_memories>\n"
        "Here is what I found:\n<tool_call>{\"name\":\"search\"}</tool_call>\n"
        "- item one\n- item two<|im_end|>",
        "Here is what I found:\n\n- item one\n- item two",
    ),
    (
        "tag-formed-by-removal",
        "<thi<think>x</think>nk>hidden</think>shown",
        "shown",
    ),
]

# Assistant text that must come out byte for byte unchanged.
UNTOUCHED: list[str] = [
    "Plain answer with no markup at all.",
    '<div class="note"><p>Ordinary <b>HTML</b> stays.</p></div>',
    "If a < b and b > c then nothing follows about a and c.",
    "x<y, y>z, and the vector <1, 2> are fine.",
    "I made a tool call earlier and the function call returned 3; the thinking behind it is sound.",
    "The <thinker> element and <tooling> tag are not ours.",
    "Use `<invoke>` without attributes in your own DSL.",
    "See [Historical Context](#historical-context) and [Tool Results](#results).",
    "Pipes | like | this and <- arrows -> and <= >= operators.",
    "  indented code\n\n\n\nwith blank lines kept  ",
    "Emoji 🎉 and full-width ｜bars｜ without angle brackets.",
    "Shell: cat <<EOF | grep x\nEOF",
]

# (id, text, expected) for redact_secrets; expected is None when nothing may change.
REDACTION_CASES: list[tuple[str, str, str | None]] = [
    (
        "openai-project-key",
        "export OPENAI_API_KEY=sk-proj-4fG7hJ2kL9mN3pQ6rS8tV1wX5yZ0aB",
        "export OPENAI_API_KEY=[REDACTED]",
    ),
    (
        "openai-classic-key-in-prose",
        "Your key sk-a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6 should be rotated.",
        "Your key [REDACTED] should be rotated.",
    ),
    (
        "anthropic-key",
        "ANTHROPIC_API_KEY: sk-ant-api03-Zx9_Yw8-Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-AAAA",
        "ANTHROPIC_API_KEY: [REDACTED]",
    ),
    (
        "github-classic",
        "git clone https://ghp_1A2b3C4d5E6f7G8h9I0j1K2l3M4n5O6p7Q8r@github.com/acme/app",
        "git clone https://[REDACTED]@github.com/acme/app",
    ),
    (
        "github-oauth",
        "token gho_16C7e42F292c6912E7710c838347Ae178B4a returned",
        "token [REDACTED] returned",
    ),
    (
        "github-fine-grained",
        "use github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF for CI",
        "use [REDACTED] for CI",
    ),
    (
        "slack-bot",
        "SLACK_BOT_TOKEN is xoxb-2048-4096-8192abcdefghijklmnop now",
        "SLACK_BOT_TOKEN is [REDACTED] now",
    ),
    (
        "slack-user-and-app",
        "xoxp-1111-2222-3333-abcdef and xoxa-2-abcdefghijk",
        "[REDACTED] and [REDACTED]",
    ),
    (
        "aws-key-pair",
        "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
        "[default]\naws_access_key_id = [REDACTED]\naws_secret_access_key = [REDACTED]\n",
    ),
    (
        "aws-secret-json",
        '{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}',
        '{"aws_secret_access_key": "[REDACTED]"}',
    ),
    (
        "google-api-key",
        "maps key: AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY.",
        "maps key: [REDACTED].",
    ),
    (
        "jwt",
        "session=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c; Path=/",
        "session=[REDACTED]; Path=/",
    ),
    (
        "bearer-header",
        "curl -H 'Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0' https://api.example.com",
        "curl -H 'Authorization: Bearer [REDACTED]' https://api.example.com",
    ),
    (
        "password-assignment",
        "DB_URL set; password=Tr0ub4dor&3 and user=admin",
        "DB_URL set; password=[REDACTED] and user=admin",
    ),
    (
        "token-colon-quoted",
        'config: {"token": "abc def ghi", "api_key": \'k-123456\'}',
        'config: {"token": "[REDACTED]", "api_key": \'[REDACTED]\'}',
    ),
    (
        "api-key-yaml",
        "api-key: 0123456789abcdef\nretries: 3",
        "api-key: [REDACTED]\nretries: 3",
    ),
    (
        "pem-private-key",
        "Here it is:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1c2s\nZm9vYmFy\n"
        "-----END RSA PRIVATE KEY-----\nKeep it safe.",
        "Here it is:\n[REDACTED]\nKeep it safe.",
    ),
    (
        "pem-private-key-truncated",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAA",
        "[REDACTED]",
    ),
    ("prose-about-tokens", "Bearer tokens expire; the token: it is short-lived.", None),
    ("max-tokens", "max_tokens=4096, tokens: 12 used, password policy: 12+ chars", None),
    ("public-key-kept", "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n", None),
    ("ask-prefix-words", "We should ask-for-the-most-important-things-first-please today.", None),
    ("redacted-is-stable", "password=[REDACTED] Bearer [REDACTED] [REDACTED]", None),
]
