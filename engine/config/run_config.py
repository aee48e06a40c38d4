"""A run's configuration: its sections as typed dataclasses, each field with its default, its
help line (the reference docs are made from them) and its allowed range.

A preset is a TOML file whose tables map onto these sections, one table a section.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A problem with a preset or an override; the message is meant for the user as is."""


def _opt(default: Any, *, help: str = "", **checks: Any) -> Any:
    """A config field with its one-line help and its checks (min, max, below, choices)."""
    meta = {"help": help, **checks}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class DataConfig:
    source: str = _opt(
        "pydoc",
        help="'pydoc' (offline Python docs), 'tinyshakespeare', or a path to a file or folder of "
        "text (.txt, .md, ...), JSON lines (.jsonl, .jsonl.gz, .jsonl.zst) or Parquet (.parquet)",
    )
    tokenizer: str = _opt("char", help="'char' or a tiktoken encoding name such as 'r50k_base'")
    val_fraction: float = _opt(
        0.1, help="last fraction of the corpus held out (unless val_tokens is set)", min=0.0, below=1.0
    )
    val_tokens: int = _opt(
        0,
        help="tokens held out for validation, from the end of the corpus: for large corpora, "
        "e.g. 10_000_000 (0 = use val_fraction)",
        min=0,
    )
    text_field: str = _opt(
        "text", help="JSON lines and Parquet: the field (column) that holds each document's text"
    )
    separator: str = _opt(
        "\n\n",
        help="char-level: the text put between documents (BPE separates them with the "
        "tokenizer's end-of-text token)",
    )


@dataclass
class ModelConfig:
    n_layer: int = _opt(4, help="transformer blocks", min=1)
    n_head: int = _opt(4, help="attention heads per block (must divide n_embd)", min=1)
    n_embd: int = _opt(128, help="width: embedding and residual stream size", min=1)
    block_size: int = _opt(64, help="context length in tokens", min=1)
    dropout: float = _opt(
        0.0, help="dropout probability while training; 0 turns it off", min=0.0, below=1.0
    )
    bias: bool = _opt(False, help="biases in Linear and LayerNorm layers")
    # Modern parts, all off in the nanoGPT-faithful presets.
    pos_emb: str = _opt(
        "learned",
        help="positions: a learned embedding table or rotary (RoPE) in attention",
        choices=("learned", "rotary"),
    )
    norm: str = _opt("layernorm", help="normalisation layers", choices=("layernorm", "rmsnorm"))
    qk_norm: bool = _opt(False, help="RMS-normalise queries and keys before attention")
    mlp: str = _opt(
        "gelu",
        help="MLP activation: gelu (exact), gelu_tanh (GPT-2's tanh approximation, Hugging Face's "
        "gelu_new) or relu2 (ReLU squared)",
        choices=("gelu", "gelu_tanh", "relu2"),
    )
    tie_embeddings: bool = _opt(True, help="share the token embedding matrix with the output head")
    zero_init_proj: bool = _opt(False, help="zero-initialise attention and MLP output projections")
    logit_softcap: float = _opt(0.0, help="tanh soft-cap on logits; 0 turns it off", min=0.0)
    value_embeds: int = _opt(
        0,
        help="value embeddings (modded-nanogpt's): N extra token embedding tables; table i is "
        "added, times a learned scalar, to the attention values of block i and of block "
        "n_layer-N+i (0 = off; at most n_layer/2)",
        min=0,
    )
    unet_skips: bool = _opt(
        False,
        help="U-net skips (modded-nanogpt's): each block of the first half passes its output, "
        "times a learned weight, to the input of its mirror block in the second half",
    )
    grad_checkpoint: str = _opt(
        "none",
        help="recompute activations in backward instead of keeping them: 'mlp' (a block's 4h-wide "
        "MLP activations, half its memory, ~60% of its forward again) or 'full' (the whole "
        "block); true/false mean full/none",
        choices=("none", "mlp", "full"),
        from_bool=("none", "full"),
    )
    recompute_blocks: int = _opt(
        0,
        help="with grad_checkpoint mlp or full: how many blocks recompute, from the first "
        "(0 = every block)",
        min=0,
    )
    vocab_multiple: int = _opt(
        64,
        help="pad the embedding and head rows up to a multiple of this (GPT-2's 50,257 -> 50,304), "
        "for faster head matmuls; the padded rows are never sampled and exports cut them "
        "(1 = no padding)",
        min=1,
        max=4096,
    )
    init_from: str = _opt(
        "",
        help="start from existing weights (step 0, a fresh optimizer): a Hugging Face GPT-2 "
        "directory, a nanoGPT ckpt.pt, or a cockpit run directory, checkpoint or .safetensors "
        "export; the model's shape and tokenizer are theirs. A run records it as an absolute "
        "path; 'required' (a preset's) refuses to start until --init-from names them "
        "('' = from scratch)",
    )

    def __post_init__(self) -> None:
        if isinstance(self.grad_checkpoint, bool):  # a switch before it had modes
            self.grad_checkpoint = "full" if self.grad_checkpoint else "none"

    @property
    def recomputed_blocks(self) -> int:
        """How many blocks, from the first, backward recomputes (0 with grad_checkpoint none)."""
        if self.grad_checkpoint == "none":
            return 0
        return min(self.recompute_blocks or self.n_layer, self.n_layer)


# The highest LR a config, the LR dialog or a running run accepts: a larger LR is a typo, not a
# choice. One constant for all three (torch-free, so the cockpit's dialog can import it).
MAX_LR = 10.0
# Below this the logits divided by the temperature overflow float32 (from about 1e-36; 1e-300
# is 0 in float32) and sampling fails; a temperature this low already picks as greedy (0) does.
MIN_TEMPERATURE = 1e-6


@dataclass
class OptimConfig:
    name: str = _opt(
        "adamw",
        help="optimizer (muon: Muon for the blocks' matrices, AdamW for the rest; sgd: SGD with "
        "momentum, optim.sgd_momentum and optim.sgd_nesterov)",
        choices=("adamw", "muon", "lion", "adafactor", "sgd"),
    )
    lr: float = _opt(1e-3, help="peak learning rate", min_excl=0.0, max=MAX_LR)
    weight_decay: float = _opt(
        0.1, help="decoupled weight decay on matrices and embeddings (0 = none)", min=0.0
    )
    beta1: float = _opt(
        0.9,
        help="AdamW/Lion/Adafactor first-moment decay (Adafactor: 0 keeps none)",
        min=0.0,
        below=1.0,
    )
    beta2: float = _opt(
        0.95, help="AdamW/Lion/Adafactor second-moment decay", min=0.0, below=1.0
    )
    eps: float = _opt(1e-8, help="AdamW's and Adafactor's denominator epsilon", min_excl=0.0)
    grad_clip: float = _opt(1.0, help="max gradient norm; 0 turns clipping off", min=0.0)
    sgd_momentum: float = _opt(
        0.9,
        help="SGD's momentum: the buffer b = momentum * b + gradient (0 = plain SGD)",
        min=0.0,
        below=1.0,
    )
    sgd_nesterov: bool = _opt(
        True,
        help="SGD's Nesterov form: each step follows gradient + momentum * b instead of b (with "
        "momentum 0 both are plain SGD)",
    )
    muon_lr: float = _opt(0.02, help="Muon's LR for the 2-D block matrices", min_excl=0.0)
    muon_momentum: float = _opt(0.95, help="Muon's (Nesterov) momentum", min=0.0, below=1.0)
    muon_ns: str = _opt(
        "bf16",
        help="Muon's orthogonalisation: Newton-Schulz in 'bf16' (torch's, per matrix) or 'fp32' "
        "(batched by shape; faster on CPUs), or Polar Express, 5 steps tuned per step, closer "
        "to orthogonal: 'polar' (fp32, batched) or 'polar_bf16'",
        choices=("bf16", "fp32", "polar", "polar_bf16"),
    )
    muon_ns_steps: int = _opt(
        5,
        help="Muon's orthogonalisation steps: Newton-Schulz iterations, or the first N of Polar "
        "Express's 5 tuned ones (past 5, its last repeats); fewer are cheaper and less orthogonal",
        min=1,
        max=10,
    )
    muon_variant: str = _opt(
        "muon",
        help="'normuon': Muon's orthogonalised update divided per neuron (row) by its running "
        "RMS, then rescaled to Muon's norm (the speedrun record's NorMuon)",
        choices=("muon", "normuon"),
    )
    normuon_beta2: float = _opt(
        0.95, help="NorMuon's second-moment decay (the record uses 0.9)", min=0.0, below=1.0
    )
    cautious_wd: bool = _opt(
        False,
        help="cautious weight decay (AdamW's and Muon's steps): decay a weight only where its "
        "update has the weight's sign, i.e. also pulls it toward zero",
    )
    embed_lr: float = _opt(
        0.0, help="peak LR of the embeddings (and of a head tied to them); 0 = optim.lr", min=0.0,
        max=MAX_LR,
    )
    head_lr: float = _opt(
        0.0, help="peak LR of an untied head (lm_head); 0 = optim.lr", min=0.0, max=MAX_LR
    )
    scalar_lr: float = _opt(
        0.0, help="peak LR of gains, biases and other 1-D parameters; 0 = optim.lr", min=0.0,
        max=MAX_LR,
    )


@dataclass
class ScheduleConfig:
    kind: str = _opt(
        "cosine",
        help="LR shape after warmup: cosine decay, warmup-stable-decay, or constant",
        choices=("cosine", "wsd", "constant"),
    )
    warmup_steps: int = _opt(100, help="steps of linear warmup to the peak LR (0 = none)", min=0)
    decay_steps: int = _opt(0, help="cosine: steps until min_lr (0 = max_steps)", min=0)
    min_lr: float = _opt(1e-4, help="LR floor", min=0.0)
    decay_fraction: float = _opt(
        0.2, help="wsd: final fraction of the run spent decaying", min=0.0, max=1.0
    )
    decay_start: int = _opt(
        0,
        help="wsd: the step the decay starts, to max_steps (0 = from decay_fraction); a live "
        "'cool down now' sets it",
        min=0,
    )


@dataclass
class TrainConfig:
    max_steps: int = _opt(2000, help="optimizer steps in the whole run", min=1)
    batch_size: int = _opt(12, help="micro-batch size in sequences", min=1)
    grad_accum: int = _opt(1, help="micro-batches per optimizer step", min=1)
    # the speedrun's batch-shape schedules, off at 0
    batch_start: int = _opt(
        0,
        help="batch-size schedule: sequences per micro-batch at step 0, growing linearly to "
        "train.batch_size over train.batch_ramp_steps, in multiples of itself (0 = off); larger "
        "than train.batch_size (a micro-batch an out-of-memory retry split), it grows to the "
        "fewest of train.grad_accum's micro-batches that hold it",
        min=0,
    )
    batch_ramp_steps: int = _opt(
        0, help="batch-size schedule: steps until micro-batches reach train.batch_size", min=0
    )
    seq_start: int = _opt(
        0,
        help="sequence-length warmup: tokens per training sequence at step 0, growing linearly "
        "to model.block_size over train.seq_warmup_steps, in multiples of itself (0 = off; "
        "evaluations always read whole blocks)",
        min=0,
    )
    seq_warmup_steps: int = _opt(
        0, help="sequence-length warmup: steps until sequences reach model.block_size", min=0
    )
    device: str = _opt("auto", help="'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'")
    dtype: str = _opt(
        "auto",
        help="autocast dtype (auto: bfloat16 on GPUs that have it, else float16; float32 on CPU)",
        choices=("auto", "float32", "bfloat16", "float16"),
    )
    compile: bool = _opt(False, help="torch.compile the model")
    float8: str = _opt(
        "off",
        help="float8 training of the MLP and head matmuls (torchao, pip install 'cockpit[float8]'): "
        "'on' needs a CUDA GPU of compute capability 8.9 or higher; 'emulate' runs torchao's "
        "float8 numerics in ordinary matmuls on any device (checks, no speedup); true/false mean "
        "on/off",
        choices=("off", "on", "emulate"),
        from_bool=("off", "on"),
    )
    threads: int = _opt(
        0,
        help="CPU threads for torch's arithmetic (0 = auto: on CPU the count the steps are fastest at, timed during the first steps and again when the step time drifts; under torchrun one fewer than the cores; OMP_NUM_THREADS, if set, and GPUs keep torch's default)",
        min=0,
        max=1024,
    )
    parallel: str = _opt(
        "auto",
        help="under torchrun: ddp (a replica per rank), fsdp (sharded) or auto (ddp when the model fits one device)",
        choices=("auto", "ddp", "fsdp"),
    )
    seed: int = _opt(
        1337, help="random seed: initial weights, batch order, dropout", min=0, max=2**32 - 1
    )  # numpy's generator takes no other
    log_every: int = _opt(0, help="steps between loss read-backs (0 = 1 on CPU, 10 on GPU)", min=0)
    check_finite: bool = _opt(
        True, help="refuse a step whose gradient norm is not finite (on the device, no sync)"
    )
    spike_sigma: float = _opt(
        0.0, help="a loss this many std devs above its moving average is a spike (0 = off)", min=0.0
    )
    on_anomaly: str = _opt(
        "auto",
        help="on NaN or spike: pause, rollback (to the last checkpoint, LR halved) or auto (pause in the app, rollback headless)",
        choices=("auto", "pause", "rollback"),
    )
    max_rollbacks: int = _opt(3, help="rollbacks before a headless run gives up", min=0)
    stop_at_val: float = _opt(
        0.0,
        help="finish the run (final checkpoint) at the first periodic evaluation (eval.interval, "
        "eval.fine_interval near it) whose val loss is at or below this, before train.max_steps (0 = off)",
        min=0.0,
    )
    time_budget: float = _opt(
        0.0,
        help="finish the run (final evaluation and checkpoint) once its training time, the time in "
        "training steps alone (evaluations, samples, saves and pauses not counted; a resume counts "
        "what it trained before), reaches this many seconds, before train.max_steps (0 = off)",
        min=0.0,
    )


@dataclass
class EvalConfig:
    interval: int = _opt(250, help="steps between evaluations (0 = only at the end)", min=0)
    fine_interval: int = _opt(
        0,
        help="with train.stop_at_val: steps between evaluations once the next periodic one may "
        "reach it (the val loss above it is at most 3 times what it fell over the last eval.interval "
        "steps; then for eval.interval steps at least), so the crossing is seen within this many "
        "steps (0 = off)",
        min=0,
    )
    batches: int = _opt(20, help="batches per split (the same fixed batches at every eval)", min=1)
    full_val: bool = _opt(False, help="evaluate val on the whole split, deterministically")
    batch_size: int = _opt(0, help="eval batch size (0 = train.batch_size)", min=0)


@dataclass
class SampleConfig:
    interval: int = _opt(500, help="steps between samples (0 = never)", min=0)
    prompts: list[str] = _opt(["\n"], help="texts to continue, one sample each")
    max_new_tokens: int = _opt(200, help="tokens generated per sample", min=1)
    temperature: float = _opt(
        0.8, help="sampling temperature (lower is more predictable)", min=MIN_TEMPERATURE
    )
    top_k: int = _opt(200, help="0 = no top-k", min=0)


@dataclass
class CheckpointConfig:
    interval: int = _opt(1000, help="steps between checkpoints (0 = only at the end)", min=0)
    keep_last: int = _opt(3, help="periodic checkpoints kept on disk (older ones deleted)", min=1)
    keep_best: bool = _opt(True, help="also keep the checkpoint with the best val loss")


@dataclass
class LogConfig:
    tensorboard: bool = _opt(
        False,
        help="also write TensorBoard event files to RUN_DIR/tensorboard (needs the tensorboard package)",
    )
    metrics_port: int = _opt(
        0,
        help="serve the live run's figures to Prometheus on 127.0.0.1:PORT/metrics, with the token in "
        "RUN_DIR/metrics.token (needs the prometheus_client package; 0 = off)",
        min=0,
        max=65535,
    )


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "optim": OptimConfig,
    "schedule": ScheduleConfig,
    "train": TrainConfig,
    "eval": EvalConfig,
    "sample": SampleConfig,
    "checkpoint": CheckpointConfig,
    "log": LogConfig,
}
TOP_LEVEL_KEYS = ("name", "description", "extends")


@dataclass
class RunConfig:
    name: str = "custom"
    description: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def tokens_per_step(self) -> int:
        return self.train.batch_size * self.train.grad_accum * self.model.block_size

    @property
    def decay_steps(self) -> int:
        return self.schedule.decay_steps or self.train.max_steps
