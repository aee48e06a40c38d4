"""CPU threads chosen by measurement (engine/train/thread_tuner.py): the decision, the state
machine on a fake clock, and a real run measuring against a busy process the test starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import torch

from engine.config.presets import load_preset
from engine.events import ThreadsChosen
from engine.train.thread_tuner import (
    DRIFT_WAIT_S,
    INTERVAL_S,
    RECENT,
    START_WARMUP_STEPS,
    TIMED_STEPS,
    FixedThreads,
    ThreadChoice,
    ThreadTuner,
    candidate_counts,
    keep_threads,
    thread_tuner,
)
from engine.train.threads import usable_cores
from engine.train.trainer import Trainer
from tests.tiny import tiny_overrides


def test_the_fastest_count_is_kept_unless_the_one_in_use_is_within_the_margin() -> None:
    assert keep_threads({1: 0.410, 2: 0.240}, current=1) == 2  # 240 ms beats 410 by far
    assert keep_threads({1: 0.410, 2: 0.240}, current=2) == 2
    assert keep_threads({1: 0.100, 2: 0.400}, current=2) == 1  # collapsed under load
    # 95 ms is 5% faster than 100 ms: within the 10% margin, the count in use stays
    assert keep_threads({1: 0.100, 2: 0.095}, current=1) == 1
    assert keep_threads({1: 0.095, 2: 0.100}, current=2) == 2
    # 89 ms against 100 ms: 12% faster, past the margin
    assert keep_threads({1: 0.100, 2: 0.089}, current=1) == 2
    assert keep_threads({1: 0.100, 2: 0.089}, current=1, margin=0.2) == 1
    # a tie goes to fewer threads; a count in use that was not measured does not count
    assert keep_threads({4: 0.2, 2: 0.2, 8: 0.3}, current=3) == 2
    assert keep_threads({4: 0.2, 8: 0.3}, current=8) == 4


def test_candidates_are_every_count_on_a_few_cores_and_a_spread_on_many() -> None:
    assert candidate_counts(1) == (1,)
    assert candidate_counts(2) == (1, 2)
    assert candidate_counts(4) == (1, 2, 3, 4)
    assert candidate_counts(8) == (2, 4, 7, 8)
    assert candidate_counts(64) == (16, 32, 63, 64)


class Machine:
    """A fake machine: a step's time is what the table says for the count in use; the clock is
    set by the test."""

    def __init__(self, times: dict[int, float], start: int) -> None:
        self.times, self.threads, self.now = times, start, 0.0
        self.set_calls: list[int] = []
        self.choices: list[ThreadChoice] = []

    def set_threads(self, n: int) -> None:
        self.set_calls.append(n)
        self.threads = n

    def tuner(self, counts: tuple[int, ...]) -> ThreadTuner:
        return ThreadTuner(counts, self.threads, self.choices.append,
                           set_threads=self.set_threads, clock=lambda: self.now)  # fmt: skip

    def steps(self, tuner: ThreadTuner, n: int) -> list[int]:
        """Train `n` steps; the count each one ran at."""
        ran = []
        for _ in range(n):
            ran.append(self.threads)
            tuner.step_done(self.times[self.threads])
        return ran


def test_the_first_steps_measure_each_count_and_keep_the_fastest() -> None:
    machine = Machine({1: 0.410, 2: 0.240}, start=1)
    tuner = machine.tuner((1, 2))
    ran = machine.steps(tuner, START_WARMUP_STEPS + TIMED_STEPS + 1 + TIMED_STEPS + 5)
    # the count in use first (after the run's warm-up), then 2 with one untimed step, then 2 kept
    assert ran[: START_WARMUP_STEPS + TIMED_STEPS] == [1] * (START_WARMUP_STEPS + TIMED_STEPS)
    assert set(ran[START_WARMUP_STEPS + TIMED_STEPS :]) == {2}
    assert machine.choices == [ThreadChoice(2, 1, {1: 0.410, 2: 0.240}, "the first steps")]
    assert machine.set_calls == [2] and not tuner.measuring


def test_a_collapsed_count_gets_no_more_steps_than_it_takes_to_see_it() -> None:
    machine = Machine({1: 0.1, 2: 5.0}, start=1)
    tuner = machine.tuner((1, 2))
    ran = machine.steps(tuner, START_WARMUP_STEPS + TIMED_STEPS + 1 + 3)
    assert ran.count(2) == 1  # its first step took 50x the fastest: that is its time
    assert machine.choices == [ThreadChoice(1, 1, {1: 0.1, 2: 5.0}, "the first steps")]
    assert machine.set_calls == [2, 1] and machine.threads == 1
    # 3x the fastest: a slow first step is not enough, one timed step at 3x is
    machine = Machine({1: 0.1, 2: 0.3}, start=1)
    tuner = machine.tuner((1, 2))
    ran = machine.steps(tuner, START_WARMUP_STEPS + TIMED_STEPS + 2 + 3)
    assert ran.count(2) == 2 and machine.choices[0].step_times_s == {1: 0.1, 2: 0.3}


def settled(times: dict[int, float], start: int) -> tuple[Machine, ThreadTuner]:
    machine = Machine(times, start)
    tuner = machine.tuner((1, 2))
    while not machine.choices:
        machine.steps(tuner, 1)
    return machine, tuner


def test_a_drift_of_the_step_time_measures_again_and_follows_the_load() -> None:
    machine, tuner = settled({1: 0.410, 2: 0.240}, start=1)
    machine.steps(tuner, 10 * RECENT)  # nothing changed: no measurement, no set
    assert len(machine.choices) == 1 and machine.set_calls == [2]
    machine.times = {1: 0.420, 2: 0.900}  # a busy process started: a thread per core collapses
    machine.steps(tuner, RECENT)  # the median of the next RECENT steps is 900 ms, not 240
    assert tuner.measuring
    machine.steps(tuner, TIMED_STEPS + 1 + TIMED_STEPS)  # at 2 (in use: no warm-up), then 1
    assert machine.choices[-1] == ThreadChoice(
        1, 2, {2: 0.900, 1: 0.420}, "the step time went from 240 ms to 900 ms"
    )
    assert machine.threads == 1
    # 24% slower is noise: no measurement
    machine.times = {1: 0.420 * 1.24, 2: 0.3}
    machine.steps(tuner, 3 * RECENT)
    assert len(machine.choices) == 2 and not tuner.measuring


def test_a_load_that_keeps_moving_but_never_changes_the_count_is_measured_less_and_less() -> None:
    machine, tuner = settled({1: 0.1, 2: 5.0}, start=1)  # 1 kept: the next drift waits
    machine.times = {1: 0.2, 2: 5.0}
    machine.now = DRIFT_WAIT_S - 1
    machine.steps(tuner, RECENT)
    assert not tuner.measuring  # drifted, but too soon after a measurement that kept the count
    machine.now = DRIFT_WAIT_S + 1
    machine.steps(tuner, RECENT)
    assert tuner.measuring
    machine.steps(tuner, TIMED_STEPS + 1)
    assert machine.choices[-1].threads == 1 and machine.choices[-1].reason.endswith("to 200 ms")
    measured_at = machine.now
    machine.times = {1: 0.1, 2: 5.0}  # kept again: twice the wait
    machine.now = measured_at + 2 * DRIFT_WAIT_S - 1
    machine.steps(tuner, RECENT)
    assert not tuner.measuring
    machine.now = measured_at + 2 * DRIFT_WAIT_S + 1
    machine.steps(tuner, RECENT)
    assert tuner.measuring


def test_the_interval_measures_again_even_when_nothing_drifted() -> None:
    machine, tuner = settled({1: 0.410, 2: 0.240}, start=1)
    machine.now = INTERVAL_S - 1
    machine.steps(tuner, RECENT)
    assert not tuner.measuring
    machine.now = INTERVAL_S + 1
    machine.steps(tuner, RECENT)
    assert tuner.measuring
    machine.steps(tuner, TIMED_STEPS + 1 + TIMED_STEPS)
    assert machine.choices[-1] == ThreadChoice(
        2, 2, {2: 0.240, 1: 0.410}, "5 minutes since the last measurement"
    )
    assert machine.set_calls == [2, 1, 2]  # measured 1, back to 2


def test_the_count_is_measured_only_on_cpu_with_auto_and_no_omp_nor_ranks(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    choose = lambda choice: None  # noqa: E731
    on_cpu = thread_tuner(0, "cpu", False, choose)
    assert isinstance(on_cpu, ThreadTuner) == (usable_cores() > 1)
    assert isinstance(
        thread_tuner(2, "cpu", False, choose), FixedThreads
    )  # train.threads = 2 fixes it
    assert isinstance(thread_tuner(0, "cuda", False, choose), FixedThreads)
    assert isinstance(thread_tuner(0, "cpu", True, choose), FixedThreads)  # under torchrun
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert isinstance(thread_tuner(0, "cpu", False, choose), FixedThreads)


def test_the_record_says_the_count_and_why() -> None:
    ev = ThreadsChosen(step=8, threads=2, previous=1, step_times_s={"2": 0.24, "1": 0.41},
                       reason="the first steps")  # fmt: skip
    assert ev.summary == "threads 2 (measured: 1→410 ms, 2→240 ms)"


@pytest.mark.skipif(usable_cores() < 2, reason="one core: nothing to choose")
def test_a_real_run_measures_each_count_against_a_busy_process_and_keeps_its_fastest(
    tmp_path, monkeypatch
) -> None:
    """A busy process on the same cores (started here): the run times both counts, records its
    choice with the times it measured, and trains on at the count it chose."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(busy.pid, os.sched_getaffinity(0))
        seen: dict[int, int] = {}  # step -> the count in use on the training thread after it

        def sink(event) -> None:  # on the training thread
            if event.kind == "step":
                seen[event.step] = torch.get_num_threads()

        counts = candidate_counts(usable_cores())
        # the longest first measurement (no count given up early), and a few steps after it
        steps = START_WARMUP_STEPS + TIMED_STEPS + (len(counts) - 1) * (1 + TIMED_STEPS) + 3
        cfg = load_preset("tiny", tiny_overrides(f"train.max_steps={steps}", quiet=True))
        trainer = Trainer(cfg, run_dir=tmp_path, sinks=[sink], telemetry=False)
        thread = threading.Thread(target=trainer.run)
        thread.start()
        thread.join(120)
        assert trainer.state == "finished"
    finally:
        busy.kill()
        busy.wait()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    chosen = [r for r in records if r["kind"] == "threads"]
    assert chosen, "no measurement recorded"
    first = chosen[0]
    assert sorted(int(n) for n in first["step_times_s"]) == sorted(counts)
    times = {int(n): t for n, t in first["step_times_s"].items()}
    assert first["threads"] == keep_threads(times, first["previous"])
    assert first["reason"] == "the first steps"
    assert set(counts) <= set(seen.values())  # the training thread took each count
    after = first["step"] + 1
    assert seen[after] == first["threads"]  # and on at the one chosen


def test_train_threads_fixes_the_count_on_a_run_long_enough_to_measure(tmp_path) -> None:
    seen: set[int] = set()

    def sink(event) -> None:  # on the training thread
        if event.kind == "step":
            seen.add(torch.get_num_threads())

    cfg = load_preset("tiny", tiny_overrides("train.max_steps=14", "train.threads=1", quiet=True))
    trainer = Trainer(cfg, run_dir=tmp_path, sinks=[sink], telemetry=False)
    thread = threading.Thread(target=trainer.run)
    thread.start()
    thread.join(120)
    assert trainer.state == "finished" and seen == {1}
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert "threads" not in {json.loads(line)["kind"] for line in lines}  # nothing measured


def test_steps_that_grow_are_measured_again_at_once_and_timed_per_token() -> None:
    """A sequence-length warmup: at 256 tokens a step one thread is as fast (the choice keeps it);
    at 1,024 two threads are twice as fast. The tuner measures again as soon as the steps grow,
    not after a drift wait, and a bigger step alone is not taken for a slower machine."""
    machine = Machine({1: 0.010, 2: 0.0099}, start=1)
    tuner = machine.tuner((1, 2))
    for _ in range(START_WARMUP_STEPS + TIMED_STEPS + 1 + TIMED_STEPS + 3):
        tuner.step_done(machine.times[machine.threads], tokens=256)
    assert [c.threads for c in machine.choices] == [1]  # within the margin: kept
    machine.times = {1: 0.080, 2: 0.040}  # 4x the tokens: per token 2x slower on 1, same on 2
    ran = []
    for _ in range(1 + TIMED_STEPS + 1 + TIMED_STEPS + 3):
        ran.append(machine.threads)
        tuner.step_done(machine.times[machine.threads], tokens=1024)
    assert machine.choices[-1].threads == 2 and ran[-1] == 2
    assert machine.choices[-1].reason == "the steps went from 256 to 1,024 tokens"
    assert machine.choices[-1].step_times_s == {1: 0.080, 2: 0.040}  # at the new size
    # the same size from now on: no more measurements, however many steps
    before = len(machine.choices)
    for _ in range(100):
        tuner.step_done(machine.times[machine.threads], tokens=1024)
    assert len(machine.choices) == before and not tuner.measuring


def test_steps_that_grow_at_the_most_threads_are_not_measured_again() -> None:
    """Bigger steps divide among threads at least as well: a run at the most threads whose steps
    grow keeps its count without training steps at fewer, and the time per token at the new size
    becomes the reference (the bigger steps' better time per token is not a drift)."""
    machine = Machine({1: 0.020, 2: 0.010}, start=1)
    tuner = machine.tuner((1, 2))
    for _ in range(START_WARMUP_STEPS + TIMED_STEPS + 1 + TIMED_STEPS + 3):
        tuner.step_done(machine.times[machine.threads], tokens=256)
    assert [c.threads for c in machine.choices] == [2]
    machine.times = {1: 0.060, 2: 0.020}  # 4x the tokens at half the time per token
    machine.now = 10 * INTERVAL_S / 11  # long past any drift wait, short of the interval
    ran = []
    for _ in range(10 * RECENT):
        ran.append(machine.threads)
        tuner.step_done(machine.times[machine.threads], tokens=1024)
    assert set(ran) == {2} and len(machine.choices) == 1 and not tuner.measuring
    # a real change of the load at the new size is still a drift
    machine.times = {1: 0.030, 2: 0.080}
    for _ in range(2 * RECENT + TIMED_STEPS + 1 + TIMED_STEPS + 2):
        tuner.step_done(machine.times[machine.threads], tokens=1024)
    assert machine.choices[-1].threads == 1
    assert machine.choices[-1].reason.startswith("the step time went from 20 ms")


def test_steps_that_shrink_at_the_fewest_threads_are_not_measured_again() -> None:
    machine = Machine({1: 0.010, 2: 0.020}, start=2)
    tuner = machine.tuner((1, 2))
    for _ in range(START_WARMUP_STEPS + TIMED_STEPS + 1 + TIMED_STEPS + 3):
        tuner.step_done(machine.times[machine.threads], tokens=1024)
    assert [c.threads for c in machine.choices] == [1]
    ran = []
    for _ in range(3 * RECENT):
        ran.append(machine.threads)
        tuner.step_done(machine.times[machine.threads] / 4, tokens=256)
    assert set(ran) == {1} and len(machine.choices) == 1
