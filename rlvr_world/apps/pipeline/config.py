"""Configuration of ``rlvr-world run CONFIG``: one pydantic model read from YAML.

Every field has a description and bounds; ``configs/pipeline/*.yaml`` are the shipped examples
(a test parses each). The default data is the synthetic toaster-kitchen game
(``rlvr_world.tasks.text_game.kitchen``), so the pipeline runs on a fresh machine;
``data.records`` points at GPT-simulator transition records (``test.jsonl`` or
``crawl/<game>.jsonl.gz``) instead. The default model is a from-scratch tiny
Llama with a tokenizer trained on the run's own prompts (``model.tiny``); ``model.path`` names a
Hugging Face model directory (with its tokenizer) instead.

``rollout.engine: vllm`` serves every rollout of the run with vLLM from its own environment
(``stack.RolloutSection``); the tiny model's shape is checked against vLLM's CPU attention here.

``task: web`` reads web transitions instead (``WebDataConfig``: ``data.sources`` names the shared
MiniWoB++ / WebArena files or collector output directories); the rest of the config is the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from rlvr_world.apps.run.configfile import Section as _Section
from rlvr_world.apps.run.configfile import read_config
from rlvr_world.apps.run.grpo import RlSection
from rlvr_world.apps.run.stack import RolloutSection, head_size_error
from rlvr_world.devices import DeviceName, PrecisionName, TorchThreads
from rlvr_world.grpo.settings import RewardValue
from rlvr_world.tiny_model import TinyLMConfig


class KitchenData(_Section):
    """The synthetic game (``rlvr_world.tasks.text_game.kitchen``)."""

    slices: int = Field(default=2, ge=1, le=3, description="bread slices in the world")
    goal: int = Field(default=1, ge=1, le=3, description="toasted slices on the plate to win")


class _SplitSeeded(_Section):
    """A data section whose train/held-out split and held-out draw can be seeded apart from
    ``run.seed`` (text and web runs alike)."""

    split_seed: int | None = Field(
        default=None,
        ge=0,
        le=2**31 - 1,
        description="seed of the train/held-out split and the held-out draw; unset: run.seed. "
        "Fixed, every seed of a comparison trains and evaluates on the same items",
    )

    def split_seed_for(self, run_seed: int) -> int:
        """The seed the split and the held-out draw use in a run seeded ``run_seed``."""
        return run_seed if self.split_seed is None else self.split_seed


class DataConfig(_SplitSeeded):
    """Where the transitions come from and how they are split (seeded by ``run.seed``)."""

    kitchen: KitchenData = Field(default_factory=KitchenData, description="synthetic game")
    records: Path | None = Field(
        default=None,
        description="GPT-simulator records file (JSON Lines, .gz ok), split by hash; unset "
        "(and no crawl_dir): the kitchen game",
    )
    crawl_dir: Path | None = Field(
        default=None,
        description="GPT-simulator crawl folder (<game>.jsonl.gz): train on every transition "
        "not in test_records, evaluate on test_records (the official test split)",
    )
    test_records: Path | None = Field(
        default=None, description="the official test records (test.jsonl); with crawl_dir"
    )
    games: list[str] | None = Field(
        default=None, description="only these games (crawl and test); unset: every game"
    )
    max_per_game: int | None = Field(
        default=None, ge=1, le=10_000_000, description="crawl transitions sampled per game"
    )
    max_prompt_chars: int | None = Field(
        default=None,
        ge=100,
        le=10_000_000,
        description="leave out transitions whose prompt is longer (a CPU context budget); "
        "counted in the run log",
    )
    prompt: Literal["compact", "bare", "paper"] = Field(
        default="compact",
        description="compact: instruction + state + action; bare: the same without the "
        "instruction paragraph (a from-scratch model cannot read it; ~120 tokens shorter); "
        "paper: the paper's prompt with the game's rules and in-context examples (rules_dir)",
    )
    rules_dir: Path | None = Field(
        default=None,
        description="GPT-simulator data folder with rules/*.json and examples.json (paper prompt)",
    )
    test_fraction: float = Field(default=0.2, gt=0.0, lt=1.0, description="held-out share")
    max_train: int = Field(default=600, ge=1, le=10_000_000, description="most train prompts")
    max_test: int = Field(
        default=30,
        ge=1,
        le=1_000_000,
        description="most held-out prompts: a seeded draw that keeps the changed/unchanged "
        "shares of the whole held-out split",
    )

    @model_validator(mode="after")
    def _one_source(self) -> DataConfig:
        if self.records is not None and self.crawl_dir is not None:
            raise ValueError("data: set records or crawl_dir, not both")
        if (self.crawl_dir is None) != (self.test_records is None):
            raise ValueError("data: crawl_dir and test_records go together")
        if self.prompt == "paper" and self.rules_dir is None:
            raise ValueError("data.prompt: paper needs data.rules_dir (rules/ and examples.json)")
        return self


class WebDataConfig(_SplitSeeded):
    """Web transitions (``task: web``): MiniWoB++ / WebArena files or collector directories.

    Prepared by ``rlvr_world.web.items.build_web_items``: de-duplicated, split by task family (a
    held-out task is never trained on, not even as a variant), filtered by length, capped. The
    length filter runs twice: on characters (``max_chars``, before the tokenizer exists) and on
    the policy's tokens (``max_tokens``, the SFT context), each counted in the run log."""

    sources: list[Path] = Field(
        min_length=1,
        description="transition files (*.jsonl), folders of them (data/web) or collector "
        "output directories (their transitions.jsonl)",
    )
    prompt: Literal["compact", "paper"] = Field(
        default="compact",
        description="compact: the paper's slots with a three-line instruction; paper: the "
        "paper's prompt with its rules, action vocabulary and example (~500 tokens more)",
    )
    test_fraction: float = Field(
        default=0.2, ge=0.0, lt=1.0, description="held-out share of task families"
    )
    test_tasks: list[str] = Field(
        default_factory=list,
        description="held-out tasks (their whole families); empty: a seeded test_fraction",
    )
    max_chars: int | None = Field(
        default=2000,
        ge=100,
        le=10_000_000,
        description="leave out examples whose prompt + target exceed this many characters "
        "(the CPU budget; the paper's limit is 5,000 tokens); null: no character limit",
    )
    max_tokens: int = Field(
        default=1024,
        ge=16,
        le=1_000_000,
        description="leave out examples whose <bos> prompt + target <eos> exceed this many "
        "tokens of the policy's tokenizer (the SFT context)",
    )
    max_train: int = Field(default=1000, ge=1, le=10_000_000, description="most train items")
    max_test: int = Field(default=300, ge=1, le=1_000_000, description="most held-out items")


def _data_kind(value: Any) -> str:
    """Which data section a raw ``data`` value is: ``web`` when it names ``sources``."""
    if isinstance(value, WebDataConfig) or (isinstance(value, dict) and "sources" in value):
        return "web"
    return "text_game"


TaskData = Annotated[
    Annotated[DataConfig, Tag("text_game")] | Annotated[WebDataConfig, Tag("web")],
    Discriminator(_data_kind),
]


class ModelSection(_Section):
    """The policy: a tiny model built offline, or a Hugging Face directory."""

    tiny: TinyLMConfig | None = Field(
        default_factory=TinyLMConfig, description="from-scratch model + tokenizer (default)"
    )
    path: Path | None = Field(default=None, description="HF model dir with its tokenizer")
    backend: Literal["auto", "transformers"] = Field(
        default="auto",
        description="auto: a Llama-shaped model runs on the torch-only rlvr_world.llama in the "
        "rollout services (transformers engine) and the trainer (without LoRA), so neither "
        "imports transformers; transformers: always on transformers' classes",
    )

    @model_validator(mode="after")
    def _one(self) -> ModelSection:
        if self.path is not None and "tiny" not in self.model_fields_set:
            object.__setattr__(self, "tiny", None)
        if (self.path is None) == (self.tiny is None):
            raise ValueError("model: set exactly one of model.tiny and model.path")
        return self


class SftSection(_Section):
    """SFT warm-up before RLVR (``trainer.sft``)."""

    enabled: bool = Field(default=True, description="run SFT first")
    epochs: int = Field(default=3, ge=1, le=1000, description="passes over the train prompts")
    lr: float = Field(default=2e-3, gt=0.0, le=1.0, description="peak learning rate")
    batch_size: int = Field(default=8, ge=1, le=4096, description="examples per step")
    schedule: Literal["constant", "cosine"] = Field(
        default="constant", description="learning rate after the warm-up: constant or cosine to 0"
    )
    torch_threads: TorchThreads = 2
    max_length: int = Field(
        default=1024,
        ge=8,
        le=1_000_000,
        description="text runs: longest example in tokens (<bos> prompt target <eos>); a longer "
        "train example is refused, a longer held-out one left out of the held-out loss and "
        "counted (web runs: data.max_tokens)",
    )
    share_prompts: bool = Field(
        default=False,
        description="steps take transitions of one state (prompts that differ only in the "
        "action line) together and run the state's tokens once (trainer.sft); the control too",
    )
    group_rows: int = Field(
        default=0,
        ge=0,
        le=4096,
        description="share_prompts: most transitions of one state in a step (0: batch_size)",
    )


class TextRl(RlSection):
    """GRPO of a language world model (shared fields: ``apps.run.grpo.RlSection``)."""

    max_tokens: int = Field(default=160, ge=1, le=100_000, description="new tokens per sample")
    reward_variant: Literal["strict", "paper"] = Field(default="strict", description="variant")
    reward_type: Literal["binary", "task_specific", "f1", "item_f1", "soft_item_f1"] | None = Field(
        default=None,
        description="text game: binary (null: default) | task_specific; web: f1 (null: default, "
        "the paper's) | item_f1 (F1 over tree items only, rlvr_world.rewards.web) | soft_item_f1 "
        "(item_f1 with credit for near-miss items)",
    )
    truncated_reward: RewardValue = Field(
        default=0.0,
        description="reward an answer cut at max_tokens trains with (DAPO's overlong "
        "punishment; the scorers read the first complete answer, so without it an answer that "
        "never stops is free); null: its scored reward",
    )


class EvalSection(_Section):
    """Greedy held-out evaluation: the start, the control and the RLVR model on the same items,
    plus a held-out curve during GRPO."""

    enabled: bool = Field(default=True, description="evaluate (start, control, RLVR)")
    max_tokens: int = Field(default=160, ge=1, le=100_000, description="new tokens per answer")
    curve_every: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="evaluate a held-out slice whenever the trainer has taken this many more "
        "steps (0: no curve)",
    )
    curve_items: int = Field(
        default=50, ge=1, le=1_000_000, description="held-out items of each curve point"
    )


class ControlSection(_Section):
    """The control: continued SFT (MLE) from the same start checkpoint, same budget as GRPO.

    ``samples`` and ``steps`` are fair on any hardware; ``wall_time`` is fair only where an SFT
    step and a GRPO step cost alike (on a GPU an SFT step is far cheaper than a GRPO step, which
    also generates and scores: the video smoke on an H200 gave its control 1,500 MLE steps in
    the time of 3 GRPO steps)."""

    enabled: bool = Field(default=True, description="train and evaluate the control")
    budget: Literal["samples", "steps", "wall_time"] = Field(
        default="samples",
        description="samples: as many SFT examples as GRPO trained sequences (groups x G); "
        "steps: as many SFT optimizer steps (sft.batch_size examples each) as GRPO took "
        "optimizer steps; wall_time: SFT for as long as the GRPO phase took (not fair on a GPU)",
    )
    lr: float | None = Field(
        default=None, gt=0.0, le=1.0, description="learning rate (unset: sft.lr, constant)"
    )

    def sft_budget(
        self, sft: SftSection, grpo_s: float, trained: int, steps: int = 0
    ) -> dict[str, Any]:
        """The control's SFT budget: GRPO's wall time ``grpo_s``, its ``trained`` sequences, or
        its optimizer ``steps``."""
        fixed = {"epochs": 10_000, "lr": self.lr or sft.lr, "schedule": "constant"}
        if self.budget == "wall_time":
            return {**fixed, "max_seconds": grpo_s}
        if self.budget == "steps":
            return {**fixed, "max_steps": max(1, steps)}
        return {**fixed, "max_steps": max(1, -(-trained // sft.batch_size))}


class RunSection(_Section):
    """Run directory, seed and process settings."""

    run_dir: Path = Field(default=Path("runs/kitchen"), description="everything the run writes")
    seed: int = Field(
        default=0,
        ge=0,
        le=2**31 - 1,
        description="seeds everything: the split and draws of the data, the model's "
        "initialisation, SFT order, GRPO sampling and data order, the trainer, the control",
    )
    service_start_timeout_s: float = Field(
        default=180.0, gt=0.0, le=3600.0, description="wait for each service to be ready"
    )
    reward_workers: int = Field(default=1, ge=1, le=256, description="reward scoring processes")
    trainer_idle_timeout_s: float = Field(
        default=120.0, gt=0.0, le=86_400.0, description="trainer stops after this long idle"
    )
    progress: bool = Field(default=True, description="tqdm progress bars")
    device: DeviceName = Field(
        default="auto",
        description="every phase's device (rlvr_world.devices): SFT, the trainer, the control, "
        "the rollout services (and so the evaluations), the decoder's frames, the reward's "
        "perceptual models; auto: CUDA where torch sees a GPU, else the CPU; cpu; cuda; cuda:N",
    )
    precision: PrecisionName = Field(
        default="auto",
        description="auto: bf16 on a CUDA device that supports it, fp32 elsewhere; fp32; bf16 "
        "(the CPU too). bf16: SFT, the control and the trainer under bf16 autocast (float32 "
        "weights), the rollout services' weights in bfloat16",
    )


class PipelineConfig(_Section):
    """One ``rlvr-world run``."""

    task: Literal["text_game", "web"] = Field(
        default="text_game", description="the world-model task"
    )
    data: TaskData = Field(
        default_factory=DataConfig,
        description="text game: DataConfig; web: WebDataConfig (data.sources)",
    )
    model: ModelSection = Field(default_factory=ModelSection, description="policy model")
    sft: SftSection = Field(default_factory=SftSection, description="SFT warm-up")
    rl: TextRl = Field(default_factory=TextRl, description="GRPO")
    rollout: RolloutSection = Field(
        default_factory=RolloutSection,
        description="the engine of every rollout service (GRPO, evaluation, control)",
    )
    eval: EvalSection = Field(default_factory=EvalSection, description="held-out evaluation")
    control: ControlSection = Field(default_factory=ControlSection, description="MLE control")
    run: RunSection = Field(default_factory=RunSection, description="run")

    @model_validator(mode="after")
    def _data_fits_task(self) -> PipelineConfig:
        if self.task == "web" and not isinstance(self.data, WebDataConfig):
            raise ValueError("task: web needs data.sources (web transition files or folders)")
        if self.task == "text_game" and isinstance(self.data, WebDataConfig):
            raise ValueError("data.sources is web data: set task: web")
        return self

    @model_validator(mode="after")
    def _reward_type_fits_task(self) -> PipelineConfig:
        kinds = {
            "text_game": ("binary", "task_specific"),
            "web": ("f1", "item_f1", "soft_item_f1"),
        }[self.task]
        if self.rl.reward_type is not None and self.rl.reward_type not in kinds:
            raise ValueError(
                f"rl.reward_type {self.rl.reward_type}: not a {self.task} reward; expected one of "
                f"{', '.join(kinds)}"
            )
        return self

    @model_validator(mode="after")
    def _vllm_takes_the_model(self) -> PipelineConfig:
        """The tiny model's head size, at load (a ``model.path`` is checked before the run:
        ``stack.check_rollout_engine``)."""
        tiny = self.model.tiny
        if self.rollout.engine == "vllm" and tiny is not None:
            why = head_size_error(tiny.hidden_size, tiny.num_heads)
            if why is not None:
                raise ValueError(f"rollout.engine vllm: model.tiny: {why}")
        return self

    @property
    def web_data(self) -> WebDataConfig:
        """The web data section; ``ValueError`` for a text-game run."""
        if not isinstance(self.data, WebDataConfig):
            raise ValueError("not a web run: data is text-game data")
        return self.data

    @property
    def text_data(self) -> DataConfig:
        """The text-game data section; ``ValueError`` for a web run."""
        if not isinstance(self.data, DataConfig):
            raise ValueError("not a text-game run: data is web data")
        return self.data


def load_pipeline_config(path: Path, overrides: dict[str, Any] | None = None) -> PipelineConfig:
    """Read a YAML file (``{}`` when empty), merge top-level section overrides, validate."""
    data = read_config(path, overrides)
    return PipelineConfig.model_validate(data)
