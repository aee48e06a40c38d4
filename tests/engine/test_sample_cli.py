"""`cockpit sample`: real runs of the command on a tiny model trained once for the module, and
the incremental decoder that keeps split UTF-8 characters out of the stream."""

from __future__ import annotations

import functools
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from command_here import cockpit_here
from run_copies import train_here

from engine.checkpoint.trained import load_trained
from engine.data.tokenizers import CharTokenizer, TiktokenTokenizer
from engine.model.gpt import GPT
from engine.model.sampling import decode_stream, encode_prompt, start_token, token_bytes_function
from tests.conftest import TIKTOKEN_CACHE

PROMPT = "def "  # the tiny preset's first sample prompt


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    # module-scoped, so conftest's per-test environment is set here by hand (the same folders)
    base = tmp_path_factory.getbasetemp()
    return {
        **os.environ,
        "TERM": "dumb",
        "COCKPIT_CACHE_DIR": str(base / "cockpit-cache"),
        "XDG_CONFIG_HOME": str(base / "xdg-config"),
        "TIKTOKEN_CACHE_DIR": str(TIKTOKEN_CACHE),
    }


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    sets = ["sample.interval=0", "train.max_steps=30"]
    return train_here(tmp_path_factory.mktemp("sample") / "run", sets, isolated_env, telemetry=True)


@pytest.fixture(scope="module")
def sample(env: dict[str, str]):
    """`cockpit sample ARGS` in this process (the ctrl+c tests start a real one)."""

    def sample(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return cockpit_here("sample", *args, stdin=stdin, env=env)

    return sample


def continuation(stdout: str, prompt: str = PROMPT) -> str:
    """What the model wrote: stdout is the prompt, the continuation and one newline."""
    assert stdout.startswith(prompt) and stdout.endswith("\n"), stdout
    return stdout[len(prompt) : -1]


@functools.cache
def greedy_reference(run_dir: Path, prompt: str, tokens: int) -> str:
    """An argmax loop over the model itself, beside the command."""
    trained = load_trained(run_dir)
    idx = torch.tensor([trained.tokenizer.encode(prompt)])
    with torch.no_grad():
        for _ in range(tokens):
            logits, _ = trained.model(idx[:, -trained.cfg.model.block_size :])
            idx = torch.cat((idx, logits[:, -1, :].argmax(-1, keepdim=True)), dim=1)
    return trained.tokenizer.decode(idx[0, len(trained.tokenizer.encode(prompt)) :].tolist())


# ------------------------------------------------------------------ the command


def test_header_on_stderr_text_alone_on_stdout(run_dir, sample):
    result = sample(str(run_dir), "--seed", "1")
    assert result.returncode == 0, result.stderr
    header = result.stderr.splitlines()[0]
    assert str(run_dir / "best.pt") in header and "step 30" in header
    assert "val loss " in header and "on cpu" in header
    assert header.endswith("40 tokens, temperature 0.8, top-k 200")  # the run's [sample]
    assert len(continuation(result.stdout)) == 40  # the run's sample.max_new_tokens
    assert "cockpit" not in result.stdout and "step" not in result.stdout


def test_threads_are_the_ones_asked_for_and_said(run_dir, sample):
    """--threads sets torch's CPU threads (a thread per core crawls on a busy machine: docs/guide/plan.md,
    "CPU threads"); the header says how many sampled."""
    for threads, said in (("1", "on cpu (1 thread);"), ("2", "on cpu (2 threads);")):
        result = sample(str(run_dir), "--seed", "1", "--tokens", "3", "--threads", threads)
        assert result.returncode == 0, result.stderr
        assert said in result.stderr.splitlines()[0]


def test_a_seed_repeats_and_another_seed_differs(run_dir, sample):
    first = sample(str(run_dir), "--seed", "5", "--tokens", "60")
    again = sample(str(run_dir), "--seed", "5", "--tokens", "60")
    other = sample(str(run_dir), "--seed", "6", "--tokens", "60")
    assert first.returncode == again.returncode == other.returncode == 0
    assert first.stdout == again.stdout
    assert first.stdout != other.stdout
    assert len(continuation(first.stdout)) == 60  # char-level: one character per token
    assert "seed" not in first.stderr  # given, so not repeated


def test_without_a_seed_the_printed_command_reproduces_the_text(run_dir, sample):
    result = sample(str(run_dir), "--tokens", "50")
    assert result.returncode == 0, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("seed ") and ": cockpit sample " in last
    seed = last.split(":")[0].removeprefix("seed ")
    words = shlex.split(last.split(": ", 1)[1])
    assert words[:2] == ["cockpit", "sample"] and words[-2:] == ["--seed", seed]
    assert sample(*words[2:]).stdout == result.stdout


def test_temperature_zero_is_greedy_and_matches_an_argmax_loop(run_dir, sample):
    first = sample(str(run_dir), "--temperature", "0", "--tokens", "25")
    again = sample(str(run_dir), "--temperature", "0", "--tokens", "25", "--seed", "9")
    assert first.returncode == 0, first.stderr
    assert first.stdout == again.stdout
    assert continuation(first.stdout) == greedy_reference(run_dir, PROMPT, 25)
    assert "seed" not in first.stderr  # nothing random to reproduce


def test_a_prompt_longer_than_the_context_is_cropped_and_said(run_dir, sample):
    prompt = "def f(x):\n    return x + 1\n" * 3  # 78 characters; block_size is 32
    result = sample(str(run_dir), "--prompt", prompt, "--tokens", "5", "--temperature", "0")
    assert result.returncode == 0, result.stderr
    assert "longer than this model's block_size 32: it sees the last 32" in result.stderr
    assert continuation(result.stdout, prompt) == greedy_reference(run_dir, prompt[-32:], 5)


def test_interactive_answers_each_line_until_quit(run_dir, sample):
    prompts = ["def ", "class "]
    result = sample(
        str(run_dir), "--interactive", "--temperature", "0", "--tokens", "12",
        stdin="\n".join([*prompts, ":q", "never "]) + "\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    expected = "".join(p + greedy_reference(run_dir, p, 12) + "\n" for p in prompts)
    assert result.stdout == expected
    assert "> " not in result.stderr  # stdin is not a terminal: no prompt drawn


def test_interactive_skips_a_bad_prompt_and_ends_at_an_empty_line_and_at_eof(run_dir, sample):
    stdin = "café\ndef \n\nclass \n"
    stopped = sample(str(run_dir), "--interactive", "--tokens", "3", stdin=stdin)
    assert stopped.returncode == 0 and stopped.stdout.startswith("def ")  # nothing for café
    assert "\ncockpit: the prompt has characters this model never saw: 'é'" in stopped.stderr
    assert "class " not in stopped.stdout
    ended = sample(str(run_dir), "--interactive", "--tokens", "3", stdin="")
    assert ended.returncode == 0 and ended.stdout == ""


def run_all(env: dict[str, str], argvs: list[list[str]]) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of several `cockpit sample`, in this process."""
    results = (cockpit_here("sample", *argv, env=env) for argv in argvs)
    return [(r.returncode, r.stdout, r.stderr) for r in results]


def test_bad_inputs_are_one_line_and_exit_2(run_dir, env, tmp_path):
    damaged = tmp_path / "damaged" / "ckpt-00000010.pt"
    damaged.parent.mkdir()
    damaged.write_bytes(b"not a checkpoint at all")
    (tmp_path / "empty").mkdir()
    cases = [
        ([str(run_dir), "--tokens", "0"], "--tokens 0: generate at least 1 token"),
        ([str(run_dir), "--temperature", "-0.5"], "--temperature -0.5: must be 0 (greedy) or more"),
        ([str(run_dir), "--top-k", "-1"], "--top-k -1: must be 0 (no top-k) or more"),
        (  # it said "sampling failed (probability tensor contains inf...); try --device cpu"
            [str(run_dir), "--temperature", "1e-300"],
            "--temperature 1e-300: too small to sample with (it picks as greedy does, and from "
            "about 1e-36 the logits divided by it are not finite in float32); give 0 for greedy, "
            "or at least 1e-06",
        ),
        (  # finite in float32, so the reason is not overflow: the message says both
            [str(run_dir), "--temperature", "1e-7"],
            "--temperature 1e-07: too small to sample with (it picks as greedy does",
        ),
        (  # it said "Overflow when unpacking long long"
            [str(run_dir), "--seed", "99999999999999999999999"],
            "--seed 99999999999999999999999: must be 0 to 18446744073709551615 (2**64 - 1)",
        ),
        ([str(run_dir), "--threads", "-1"], "--threads -1: must be 0 (auto) to 1024"),
        ([str(run_dir), "--device", "abacus"], "--device abacus: unknown device 'abacus'"),
        (
            [str(run_dir), "--prompt", "héllo 世界"],
            "characters this model never saw: 'é' '世' '界'",
        ),
        ([str(tmp_path / "nowhere")], "no such run directory or checkpoint file"),
        ([str(tmp_path / "empty")], "no checkpoint in this directory"),
        ([str(damaged.parent)], "cannot read this checkpoint"),
        ([str(damaged)], "cannot read this checkpoint"),
    ]
    if not torch.cuda.is_available():
        cases.append(([str(run_dir), "--device", "cuda"], "--device cuda: CUDA is not available"))
    for (argv, message), (code, out, err) in zip(
        cases, run_all(env, [argv for argv, _ in cases]), strict=True
    ):
        assert code == 2, (argv, err)
        assert out == "", argv
        assert err.startswith("cockpit: ") and err.count("\n") == 1, (argv, err)
        assert message in err, (argv, err)


def popen_sample(env: dict[str, str], *args: str, stdin: int | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cockpit", "sample", *args],
        stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip


def test_text_streams_and_ctrl_c_exits_130(run_dir, env):
    proc = popen_sample(env, str(run_dir), "--tokens", "100000", "--seed", "1")
    try:
        assert proc.stdout.read(len(PROMPT) + 20)  # text arrives while generation goes on
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.decode().splitlines()[-1] == "cockpit: interrupted"
    assert "Traceback" not in err.decode()


class PipeReader:
    """Everything a pipe has carried so far, read on a thread, to wait on without blocking."""

    def __init__(self, pipe) -> None:
        self.data = b""
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe) -> None:
        while chunk := pipe.read1(4096):
            self.data += chunk

    def wait_for(self, check, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not check(self.data):
            assert time.monotonic() < deadline, self.data[-500:]
            time.sleep(0.02)

    def text(self) -> str:
        self._thread.join(timeout=10)
        return self.data.decode()


def test_interactive_ctrl_c_stops_one_generation_then_at_the_prompt_exits_0(run_dir, env):
    proc = popen_sample(
        env, str(run_dir), "--interactive", "--tokens", "100000", stdin=subprocess.PIPE
    )
    out, err = PipeReader(proc.stdout), PipeReader(proc.stderr)
    try:
        for n, prompt in enumerate([b"def ", b"class "], start=1):
            proc.stdin.write(prompt + b"\n")
            proc.stdin.flush()
            out.wait_for(lambda data, p=prompt: p in data and len(data.rpartition(p)[2]) > 30)
            proc.send_signal(signal.SIGINT)  # under way: stops this generation only
            err.wait_for(lambda data, n=n: data.count(b"cockpit sample: stopped") == n)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)  # at the prompt: leave
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err.text()
    assert out.text().startswith("def ") and "\nclass " in out.text()
    assert "interrupted" not in err.text() and "Traceback" not in err.text()


def test_bpe_model_empty_prompt_and_multibyte_text(run_dir, tmp_path, sample):
    if not TIKTOKEN_CACHE.exists():
        pytest.skip("no tiktoken cache")
    # the tiny run's checkpoint with an untrained GPT-2-vocabulary model in place of its own
    state = torch.load(run_dir / "best.pt", weights_only=True)
    torch.manual_seed(0)
    state["model"] = GPT(load_trained(run_dir).cfg.model, 50257).state_dict()
    state["tokenizer"] = {"name": "r50k_base", "vocab_size": 50257}
    torch.save(state, tmp_path / "bpe.pt")
    empty = sample(str(tmp_path / "bpe.pt"), "--prompt", "", "--tokens", "5", "--seed", "1")
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.strip()  # from the end-of-text token
    text = "héllo 世界 🙂"
    result = sample(str(tmp_path / "bpe.pt"), "--prompt", text, "--tokens", "30", "--seed", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(text)


# ------------------------------------------------------------------ the pieces


@pytest.fixture
def r50k() -> TiktokenTokenizer:
    if not TIKTOKEN_CACHE.exists():
        pytest.skip("no tiktoken cache")
    return TiktokenTokenizer("r50k_base")


def test_decoding_never_prints_half_a_character(r50k):
    text = "héllo 世界 🙂"
    ids = r50k.encode(text)
    token_bytes = token_bytes_function(r50k)
    halves = [i for i in ids if not _is_utf8(token_bytes(i))]
    assert halves  # the case this is about: tokens that end inside a character
    pieces = list(decode_stream(ids, token_bytes))
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)
    assert len(pieces) < len(ids)  # tokens holding half a character waited for the rest


def test_decoding_bytes_that_never_become_text():
    table = {0: b"a", 1: b"\xe4\xb8", 2: b"b", 3: b"\xf0\x9f"}  # two unfinished characters
    pieces = list(decode_stream([0, 1, 2, 3], table.__getitem__))
    assert pieces == ["a", "\ufffdb", "\ufffd"]  # each replaced once, never revised


def test_char_tokens_decode_one_character_each():
    tokenizer = CharTokenizer("\n abé")
    ids = tokenizer.encode("abé\n")
    assert list(decode_stream(ids, token_bytes_function(tokenizer))) == ["a", "b", "é", "\n"]


def test_empty_prompts_start_from_end_of_text_or_a_newline(r50k):
    assert encode_prompt(r50k, "", 32).ids == [start_token(r50k)] == [50256]
    assert encode_prompt(CharTokenizer("\nab"), "", 32).ids == [0]


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_generate_at_temperature_zero_is_argmax_and_draws_nothing(run_dir):
    model = load_trained(run_dir).model
    start = torch.zeros((1, 1), dtype=torch.long)
    generator = torch.Generator().manual_seed(0)
    before = generator.get_state()
    out = model.generate(start, 40, temperature=0.0, top_k=5, generator=generator)
    idx = start
    with torch.no_grad():
        for _ in range(40):  # beyond block_size 32: the context is cropped the same way
            logits, _ = model(idx[:, -model.cfg.block_size :])
            idx = torch.cat((idx, logits[:, -1, :].argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(out, idx)
    assert torch.equal(generator.get_state(), before)


def test_a_failure_on_the_cpu_does_not_suggest_the_cpu():
    """A sampling failure said "try --device cpu" while it ran on the CPU."""
    from cockpit.cli.sample import other_device

    assert other_device("cpu") == ""
    if not torch.cuda.is_available() and not torch.backends.mps.is_available():
        assert other_device("auto") == ""  # auto is the CPU here
