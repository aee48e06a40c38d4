"""The LLM proposer against a real HTTP server on 127.0.0.1 that answers as the chat completions
API does, with scripted replies: good, fenced, malformed, unknown or unsafe keys, invalid values,
too slow, a server error. What it proposes, what it refuses and why, when it stops, what it sends
(the program, the log, the settings with their ranges, the key only in the auth header)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from command_here import cockpit_here
from tiny import TINY_MODEL, set_args

pytest.importorskip("openai")

from cockpit.ablation.research_log import LogRow, ResearchLog, log_dir, read_log  # noqa: E402
from cockpit.research import Proposal, ResearchContext, Stopped  # noqa: E402
from cockpit.research.llm_proposer import (  # noqa: E402
    Guarded,
    LLMProposer,
    load_program,
    parse_keys,
    parse_reply,
)
from engine.config import ConfigError  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
QUICK = [
    "--set", "sample.interval=0", "--set", "eval.batches=2", "--set", "eval.interval=0",
    "--set", "checkpoint.interval=0", "--no-telemetry",
]  # fmt: skip

KEY = "sk-test-7f3a91c2e5d84b06"  # unique: searched for in every file written
SETTABLE = ["optim.lr", "optim.weight_decay", "schedule.warmup_steps", "train.seed"]


class ChatServer:
    """A chat completions endpoint answering from a script: each entry is the reply's content,
    or ("slow", seconds, content), or ("status", code). Records every request's body and
    headers."""

    def __init__(self, script: list) -> None:
        self.script = list(script)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                outer.requests.append(body)
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path != "/v1/chat/completions" or not outer.script:
                    return self._send(404, {"error": {"message": "not found"}})
                step = outer.script.pop(0)
                if isinstance(step, tuple) and step[0] == "status":
                    return self._send(step[1], {"error": {"message": "server trouble"}})
                if isinstance(step, tuple) and step[0] == "slow":
                    time.sleep(step[1])
                    step = step[2]
                self._send(200, {
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": step}}],
                })  # fmt: skip

            def _send(self, code: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (the slow reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def chat() -> Iterator:
    servers: list[ChatServer] = []

    def start(*script: object) -> ChatServer:
        servers.append(ChatServer(list(script)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def context(**kw: object) -> ResearchContext:
    values = {"preset": "tiny", "best": {"optim.lr": 0.002}, "settable": SETTABLE[:3]}
    values.update(kw)
    return ResearchContext(**values)  # type: ignore[arg-type]


def proposer(server: ChatServer, lines: list[str], **kw: object) -> LLMProposer:
    options = {"timeout_s": 5.0, "client_retries": 0, "say": lines.append,
               "environ": {"OPENAI_API_KEY": KEY}}  # fmt: skip
    options.update(kw)
    return LLMProposer(server.url, "scripted", **options)  # type: ignore[arg-type]


GOOD = '{"change": {"optim.lr": 0.004}, "reason": "the loss fell fast at 0.002"}'


def test_a_good_reply_is_the_proposal_and_the_request_carries_what_the_agent_needs(chat) -> None:
    server = chat(GOOD)
    lines: list[str] = []
    rows = [{"id": "e1", "change": "optim.lr=0.002", "parent": "base", "val_bpb": 2.5,
             "status": "kept", "reason": "try", "note": "beat the best by 0.1"}]  # fmt: skip
    got = proposer(server, lines, program="# Aim for tokens\nBe bold.").propose(
        context(log_rows=rows, notes=["no more than 0.01 for the LR"])
    )
    assert got == Proposal({"optim.lr": 0.004}, "the loss fell fast at 0.002", "llm:scripted")
    assert got.refused == ""
    assert lines == []
    (request,) = server.requests
    assert request["model"] == "scripted"
    system, user = request["messages"]
    assert system == {"role": "system", "content": "# Aim for tokens\nBe bold."}
    text = user["content"]
    assert "Preset: tiny" in text and "optim.lr=0.002" in text
    # each key it may change with its value now, its range and its help text; no other key
    assert "- optim.lr = 0.002 (number, > 0, <= 10): peak learning rate" in text
    assert "- schedule.warmup_steps = " in text and "train.seed" not in text
    assert "e1 | optim.lr=0.002 | base | 2.5000 | kept | try | beat the best by 0.1" in text
    assert "- no more than 0.01 for the LR" in text
    assert '{"change": {"optim.lr": 0.002}, "reason":' in text
    # the key goes in the header alone
    assert server.headers[0]["authorization"] == f"Bearer {KEY}"
    assert KEY not in json.dumps(server.requests)


def test_a_fenced_reply_with_a_bare_key_is_taken(chat) -> None:
    fenced = (
        'Here is my proposal:\n```json\n{"change": {"weight_decay": 0.05}, "reason": "less"}\n```\n'
    )
    server = chat(fenced)
    got = proposer(server, []).propose(context())
    assert got is not None and got.change == {"optim.weight_decay": 0.05} and not got.refused


def test_bad_replies_are_refused_in_one_line_each_saying_what_was_wrong(chat) -> None:
    server = chat(
        "I think you should raise the learning rate.",  # malformed
        '{"change": {"optim.learning_rate": 0.01}, "reason": "x"}',  # unknown key
        '{"change": {"train.seed": 7}, "reason": "luck"}',  # unsafe: the agent may not
        '{"change": {"train.time_budget": 7}, "reason": "longer"}',  # the search fixes it
        '{"change": {"optim.lr": 50}, "reason": "big"}',  # out of range
        '{"change": {"optim.lr": 0.002}, "reason": "same"}',  # changes nothing
    )
    lines: list[str] = []
    agent = proposer(server, lines)
    got = [agent.propose(context(settable=[*SETTABLE, "data.source"])) for _ in range(6)]
    assert all(p is not None and p.proposed_by == "llm:scripted" for p in got)
    assert [p.refused.split(":")[0] for p in got] == [
        "not valid JSON (Expecting value at line 1 column 1)",
        "unknown key 'optim.learning_rate' (known",
        "train.seed is not a setting it may change (it sets how experiments are measured, where "
        "files go or the process, not the recipe; --keys may name it)",
        "train.time_budget is not a setting it may change (the search fixes it)",
        "optim.lr",
        "optim.lr=0.002",
    ]
    assert got[0].refused.endswith("I think you should raise the learning rate.")
    assert got[0].change == {}
    assert got[1].refused.endswith("(known: optim.lr, optim.weight_decay, schedule.warmup_steps)")
    assert got[4].change == {"optim.lr": 50} and got[4].reason == "big"
    assert "<= 10" in got[4].refused
    assert got[5].refused.endswith("changes nothing, the configuration has it already")
    assert all("\n" not in p.refused for p in got)
    assert lines == []  # the search says each refusal, in its log and one line


def test_the_agent_hears_why_its_last_proposal_was_refused(chat) -> None:
    server = chat(GOOD)
    rows = [{"id": "001-refused", "change": "optim.lr=50", "status": "refused",
             "proposed_by": "llm:scripted", "note": "optim.lr: expected a value <= 10.0, got 50"}]  # fmt: skip
    assert proposer(server, []).propose(context(log_rows=rows)).refused == ""
    text = server.requests[0]["messages"][1]["content"]
    assert "Your last proposal was refused: optim.lr: expected a value <= 10.0, got 50" in text


def test_a_whitelist_narrows_what_it_may_change(chat) -> None:
    server = chat('{"change": {"optim.weight_decay": 0.2}, "reason": "x"}', GOOD)
    agent = proposer(server, [], keys=parse_keys("lr"))
    assert agent.propose(context()).refused == (
        "optim.weight_decay is not a setting it may change (--keys names optim.lr)"
    )
    assert agent.propose(context()).change == {"optim.lr": 0.004}
    assert "optim.weight_decay" not in server.requests[0]["messages"][1]["content"]
    seeded = proposer(chat('{"change": {"train.seed": 3}}'), [], keys=["train.seed"])
    assert seeded.propose(context(settable=SETTABLE)).refused == ""


def test_a_slow_server_is_asked_again_then_the_search_stops(chat) -> None:
    server = chat(("slow", 2.0, GOOD), ("slow", 2.0, GOOD))
    lines: list[str] = []
    started = time.monotonic()
    with pytest.raises(Stopped):
        proposer(server, lines, timeout_s=0.3, slow_tries=2).propose(context())
    assert time.monotonic() - started < 1.8
    assert lines == [
        f"agent: {server.url} gave no answer within 0.3s (1 of 2 tries)",
        f"agent: {server.url} gave no answer within 0.3s (2 of 2 tries)",
        f"agent: {server.url} answered none of 2 tries; the search stops",
    ]


def test_slow_answers_retried_by_the_client_then_by_the_proposer_then_a_good_one(chat) -> None:
    server = chat(("slow", 1.0, GOOD), ("slow", 1.0, GOOD), GOOD)
    lines: list[str] = []
    got = proposer(server, lines, timeout_s=0.3, client_retries=1).propose(context())
    assert got is not None and got.refused == "" and len(server.requests) == 3
    assert lines == [f"agent: {server.url} gave no answer within 0.3s to 2 requests (1 of 2 tries)"]


def test_a_server_error_is_retried_by_the_client_then_the_good_reply_taken(chat) -> None:
    server = chat(("status", 500), GOOD)
    got = proposer(server, [], client_retries=1).propose(context())
    assert got is not None and got.change == {"optim.lr": 0.004}
    assert len(server.requests) == 2


def test_errors_the_search_cannot_pass_stop_it_in_one_line(chat) -> None:
    server = chat(("status", 401))
    lines: list[str] = []
    with pytest.raises(Stopped):
        proposer(server, lines).propose(context())
    assert lines == [
        f"agent: {server.url} answered HTTP 401: the key was refused: set the variable "
        "--llm-key-env names; the search stops"
    ]
    url = server.url
    server.close()
    lines.clear()
    gone = LLMProposer(url, "m", client_retries=0, say=lines.append, environ={})
    with pytest.raises(Stopped):
        gone.propose(context())
    assert lines == [f"agent: cannot reach {url} (is the server running?); the search stops"]


def test_without_a_key_a_placeholder_is_sent(chat) -> None:
    server = chat(GOOD)
    assert proposer(server, [], environ={}).propose(context()) is not None
    assert server.headers[0]["authorization"] == "Bearer no-key"


def test_the_reply_parser() -> None:
    assert parse_reply('<think>hmm</think>\n{"change": {"optim.lr": 1e-3}}') == (
        {"optim.lr": 0.001},
        "",
    )
    assert parse_reply("```\n{}\n```") == 'not a JSON object with a "change" object in it'
    assert parse_reply('{"change": {}}') == '"change" is empty: name one setting to change'
    assert parse_reply("```json\n{}\n```\n```json\n{}\n```").startswith("more than one code block")
    assert parse_reply('{"change": {"optim.lr": 1}, "reason": 3}') == '"reason" is not text'
    long = parse_reply(json.dumps({"change": {"optim.lr": 1}, "reason": "why\n" * 200}))
    assert long[1].startswith("why why") and long[1].endswith("...") and len(long[1]) == 300


def test_bad_options_are_one_line_each(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match="--keys: unknown key 'optim.lrr' \\(did you mean 'optim.lr'\\?\\)"
    ):
        parse_keys("optim.lrr")
    with pytest.raises(
        ConfigError, match="--keys: train.seed is not a setting the search may change"
    ):
        parse_keys("lr,train.seed", SETTABLE[:3])
    with pytest.raises(ConfigError, match="--keys: name at least one key"):
        parse_keys(" , ")
    with pytest.raises(ConfigError, match="no such file"):
        load_program(tmp_path / "program.md")
    (tmp_path / "empty.md").write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        load_program(tmp_path / "empty.md")
    with pytest.raises(ConfigError, match="expected an http"):
        LLMProposer("127.0.0.1:8080", "m")
    with pytest.raises(ConfigError, match="--experiments 0: expected at least 1"):
        Guarded(None, experiments=0)  # type: ignore[arg-type]


class Counting:
    def propose(self, context: ResearchContext) -> Proposal | None:
        return Proposal({"optim.lr": 0.001}, "", "changes file")


class Refusing:
    def __init__(self) -> None:
        self.calls = 0

    def propose(self, context: ResearchContext) -> Proposal | None:
        self.calls += 1
        return Proposal({"optim.lr": 0.001}, "", "llm:x", refused="" if self.calls == 2 else "bad")


def test_the_guards_stop_after_n_experiments_or_h_hours() -> None:
    lines: list[str] = []
    guarded = Guarded(Counting(), experiments=2, say=lines.append)
    assert [guarded.propose(context()) is not None for _ in range(3)] == [True, True, False]
    assert lines == ["research: 2 of --experiments 2 done; the search stops"]
    refusing = Guarded(Refusing(), experiments=1, say=lines.append)
    # the refused one was no experiment: the good one after it was the first
    assert [refusing.propose(context()).refused for _ in range(2)] == ["bad", ""]
    assert refusing.propose(context()) is None
    now = [0.0]
    timed = Guarded(Counting(), hours=0.5, say=lines.append, clock=lambda: now[0])
    assert timed.propose(context()) is not None
    now[0] = 1800.0
    assert timed.propose(context()) is None
    assert lines[-1] == "research: 0.5 hours have passed (--hours); the search stops"


# --- `cockpit research run --llm`: the search asks the agent, logs its refusals, keeps the key


def research(runs: Path, *args: str, key_env: str = "COCKPIT_TEST_LLM_KEY"):
    env = {**os.environ, "TERM": "dumb", "PYTHONPATH": str(REPO), key_env: KEY}
    return cockpit_here("research", "run", "--runs", str(runs), *args, env=env, cwd=runs.parent)


def baselines_logged(runs: Path, name: str) -> None:
    ResearchLog(log_dir(runs, name)).append([
        LogRow(f"baseline-{i}", "", "preset tiny", bpb, 10, 1.0, 1, "kept", proposed_by="search")
        for i, bpb in ((1, 2.50), (2, 2.52))
    ])  # fmt: skip


@pytest.mark.slow  # the client retries the refused connection with its back-off
def test_an_agent_out_of_reach_stops_the_search_in_one_line_and_a_rerun_continues(chat, tmp_path):
    server = chat()
    url = server.url
    server.close()
    runs = tmp_path / "runs"
    baselines_logged(runs, "gone")
    args = ["--preset", "tiny", "--budget", "1s", "--name", "gone", "--llm", url, "--model", "m",
            "--auto", "--hours", "8", *QUICK]  # fmt: skip
    done = research(runs, *args)
    assert done.returncode == 1, done.stderr
    assert f"agent: cannot reach {url} (is the server running?); the search stops" in done.stdout
    assert "research stopped: every experiment done is in the log" in done.stdout
    assert len(read_log(log_dir(runs, "gone") / "log.tsv")[0]) == 2


@pytest.mark.slow  # one real tiny run of a second of training
def test_a_search_with_an_agent_logs_its_refusals_and_writes_its_key_nowhere(chat, tmp_path):
    server = chat(
        "Raise the learning rate!",
        '{"change": {"train.seed": 5}, "reason": "a luckier seed"}',
        '```json\n{"change": {"optim.lr": 0.004}, "reason": "the loss fell fast"}\n```',
    )
    runs = tmp_path / "runs"
    corpus = tmp_path / "corpus.txt"  # small: the whole val split is evaluated at the end
    corpus.write_text(
        "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(400))
    )
    # the baselines as a search logged them: only the agent's experiments are left to run
    baselines_logged(runs, "agent")
    program = tmp_path / "program.md"
    program.write_text("# Lower val_bpb\nTry the learning rate first.\n")
    done = research(
        runs, "--preset", "tiny", "--budget", "1s", "--steps", "100000", "--name", "agent",
        "--llm", server.url, "--model", "scripted", "--llm-key-env", "COCKPIT_TEST_LLM_KEY",
        "--auto", "--experiments", "1", "--program", str(program), "--data", str(corpus), *QUICK, *set_args(TINY_MODEL),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"proposals from scripted at {server.url}" in done.stdout
    assert "research: 1 of --experiments 1 done; the search stops" in done.stdout
    rows, _ = read_log(log_dir(runs, "agent") / "log.tsv")
    assert [(r.id, r.status) for r in rows[2:4]] == [
        ("001-refused", "refused"),
        ("002-refused", "refused"),
    ]
    assert rows[2].note.startswith("not valid JSON") and "Raise the learning rate!" in rows[2].note
    assert rows[3].change == "train.seed=5" and rows[3].reason == "a luckier seed"
    assert rows[3].note.startswith("train.seed is not a setting it may change")
    (tried,) = rows[4:]
    assert tried.change == "optim.lr=0.004" and tried.status in ("kept", "discarded")
    assert (tried.proposed_by, tried.reason) == ("llm:scripted", "the loss fell fast")
    # each refusal was one line, and the agent heard why its last one was refused
    assert "001-refused: : refused: not valid JSON" in done.stdout
    assert "Your last proposal was refused: not valid JSON" in json.dumps(server.requests[1])
    assert all(h["authorization"] == f"Bearer {KEY}" for h in server.headers)
    assert server.requests[0]["messages"][0]["content"] == program.read_text()
    assert "Every experiment's own settings (the search's, fixed): " in json.dumps(
        server.requests[0]
    )
    assert "train.time_budget=1.0" in server.requests[0]["messages"][1]["content"]
    # the key: in no file the search wrote, nor in what it said
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) > 5 and not [p for p in written if KEY.encode() in p.read_bytes()]
    assert KEY not in done.stdout + done.stderr


U = "http://127.0.0.1:9/v1"
AUTO = ["--llm", U, "--model", "m", "--auto"]


@pytest.mark.parametrize(
    "args, says",
    [
        (["--changes", "C", "--llm", U], "--changes and --llm: one source of proposals, not both"),
        (["--changes", "C", "--keys", "optim.lr"], "--keys: only with --llm URL"),
        ([], "give the candidates: --changes FILE.toml, or --llm URL --model NAME --auto"),
        (["--llm", U], "--llm needs --model NAME"),
        (["--llm", U, "--model", "m"], "--llm: this command runs unattended; add --auto"),
        (AUTO, "--auto: bound the unattended search with --experiments N or --hours H"),
        ([*AUTO, "--hours", "1", "--keys", "optim.lrr"],
         "--keys: unknown key 'optim.lrr' (did you mean 'optim.lr'?)"),
        ([*AUTO, "--hours", "1", "--keys", "train.time_budget"],
         "--keys: train.time_budget is not a setting the search may change"),
        ([*AUTO, "--experiments", "0"], "--experiments 0: expected at least 1"),
        ([*AUTO, "--hours", "1", "--program", "missing.md"], "--program missing.md: no such file"),
        (["--llm", "127.0.0.1:9", "--model", "m", "--auto", "--hours", "1"], "expected an http(s) URL"),
    ],
)  # fmt: skip
def test_bad_agent_options_are_one_line_and_exit_2(tmp_path, args, says):
    changes = tmp_path / "changes.toml"
    changes.write_text("optim.lr = [6e-3]\n")
    argv = [str(changes) if a == "C" else a for a in args]
    done = research(tmp_path / "runs", "--preset", "tiny", "--budget", "1s", *argv)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr
