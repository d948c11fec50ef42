"""Tokens/s of one GRPO training step on CPU: ours (trainer.step.train_step) vs TRL, same batch.

Baseline: TRL 1.16 ``GRPOTrainer._compute_loss`` (its per-token log-probs + GRPO loss, loss_type
"bnpo" = token-mean, beta 0.001 with k3 KL, epsilon 0.2), with the reference log-probs computed by
TRL's own ``_get_per_token_logps_and_entropies`` on its reference model, then backward, grad clip
1.0 and AdamW, i.e. the same work as our step. The TRL trainer is built from a tiny local
tokenizer and model directory (no download); ``current_gradient_accumulation_steps`` is set to 1,
as TRL's training loop would. Both run in this process, one torch thread, best of N repeats.

Also ours *before* (the same ``train_step`` with the policy and reference forwards as they were:
the padding mask given to the model and every logit scaled before the gather) and ours with
every row in full (``pack(share_prompts=False)``: each of a group's G rows recomputes the shared
prompt, as TRL does), in the same run.
``--ragged`` gives each response its own length (half to all of ``--response-len``; TRL gets the
same tokens through its completion mask), so rows are padded as GRPO groups are; the pipeline's
shapes are ``--prompt-len 392 --response-len 96 --ragged`` (the bench pipeline's kitchen prompts).

    python bench/trainer_step.py [--repeats 5] [--hidden 128] [--layers 4] [--ragged]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch


def _tokenizer(vocab: int, path: Path) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers  # type: ignore[import-untyped]
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t1"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, pad_token="t0", eos_token="t2", unk_token="t1"
    )
    hf.save_pretrained(path)
    return hf


def _completion_mask(b: int, r: int, ragged: bool, g: torch.Generator) -> torch.Tensor:
    mask = torch.ones(b, r, dtype=torch.long)
    if ragged:
        for row, n in enumerate(torch.randint(r // 2, r + 1, (b,), generator=g).tolist()):
            mask[row, n:] = 0
    return mask


def _before(model: torch.nn.Module, batch: Any, temperature: float) -> torch.Tensor:
    """``trainer.model.response_logits`` before: the padding mask, all L x V logits scaled."""
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    logits = out.logits[:, :-1, :].float() / temperature
    index = batch.gather_index.unsqueeze(-1).expand(-1, -1, logits.shape[-1])
    return torch.gather(logits, 1, index)


@contextlib.contextmanager
def _forward_as(variant: str) -> Iterator[Any]:
    """The response-logits function ``train_step`` uses: the current one (``ours``), the current
    one with every row a full forward (``unshared``: ``pack(share_prompts=False)``), or
    ``_before``."""
    import functools
    from unittest import mock

    from trainer.model import pack, response_logits

    if variant == "ours":
        yield response_logits
    elif variant == "unshared":
        with mock.patch("trainer.step.pack", functools.partial(pack, share_prompts=False)):
            yield response_logits
    else:
        with mock.patch("trainer.step.response_logits", _before):
            yield _before


def _batch(args: argparse.Namespace, vocab: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    b, p, r = args.groups * args.group_size, args.prompt_len, args.response_len
    prompt = torch.randint(3, vocab, (args.groups, p), generator=g).repeat_interleave(
        args.group_size, 0
    )
    return {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones(b, p, dtype=torch.long),
        "completion_ids": torch.randint(3, vocab, (b, r), generator=g),
        "completion_mask": _completion_mask(b, r, args.ragged, g),
        "advantages": torch.randn(b, generator=g),
        "old_per_token_logps": -torch.rand(b, r, generator=g) * 5,
    }


def _ours(
    cfg: Any, model_dir: Path, batch: dict[str, torch.Tensor], repeats: int, variant: str = "ours"
) -> float:
    from rlvr_world.grpo.groups import TrainSample
    from trainer.model import frozen_copy, load_base
    from trainer.step import train_step

    policy = load_base(cfg.model, weights=model_dir)
    ref = frozen_copy(policy)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-6, betas=(0.9, 0.999), weight_decay=0.01)
    lengths = batch["completion_mask"].sum(1).tolist()
    samples = [
        TrainSample(
            group_id=str(i // 4),
            prompt_token_ids=tuple(batch["prompt_ids"][i].tolist()),
            token_ids=tuple(batch["completion_ids"][i][: lengths[i]].tolist()),
            behaviour_logprobs=tuple(batch["old_per_token_logps"][i][: lengths[i]].tolist()),
            reward=0.0,
            advantage=float(batch["advantages"][i]),
        )
        for i in range(batch["prompt_ids"].shape[0])
    ]
    best = float("inf")
    with _forward_as(variant) as forward:
        for _ in range(repeats):
            stats = train_step(
                cfg,
                policy,
                lambda b: forward(ref, b, 1.0),
                opt,
                samples,
                device=torch.device("cpu"),
            )
            best = min(best, stats.seconds)
    return best


def _trl(
    model_dir: Path, tokenizer: Any, batch: dict[str, torch.Tensor], args: argparse.Namespace
) -> float:
    from datasets import Dataset  # type: ignore[import-untyped]
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    b = batch["prompt_ids"].shape[0]
    targs = GRPOConfig(
        output_dir=str(model_dir / "trl_out"),
        per_device_train_batch_size=b,
        num_generations=args.group_size,
        beta=0.001,
        loss_type="bnpo",
        epsilon=0.2,
        use_cpu=True,
        report_to=[],
        max_completion_length=args.response_len,
        bf16=False,
        learning_rate=1e-6,
        weight_decay=0.01,
    )
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        args=targs,
        train_dataset=Dataset.from_dict({"prompt": ["t3 t4"] * b}),
        processing_class=tokenizer,
    )
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop during train()
    model: Any = trainer.model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.999), weight_decay=0.01)
    inputs = dict(batch)
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    best = float("inf")
    for _ in range(args.repeats):
        start = time.perf_counter()
        model.train()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            ref, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.ref_model, input_ids, attn, args.response_len
            )
        inputs["ref_per_token_logps"] = ref
        loss = trainer._compute_loss(model, inputs)  # type: ignore[no-untyped-call]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--response-len", type=int, default=64)
    p.add_argument("--ragged", action="store_true", help="responses of different lengths")
    args = p.parse_args()
    torch.set_num_threads(1)
    from trainer.config import TrainerConfig
    from trainer.model import build_tiny

    cfg = TrainerConfig.model_validate(
        {
            "model": {
                "tiny": {
                    "vocab_size": args.vocab,
                    "hidden_size": args.hidden,
                    "num_layers": args.layers,
                    "num_heads": 4,
                }
            },
            "batch": {"groups_per_step": args.groups, "micro_batch_size": 10_000},
            "grpo": {"dual_clip": False, "kl_type": "low_var_kl", "kl_coef": 0.001},
        }
    )
    batch = _batch(args, args.vocab)
    tokens = int(batch["completion_mask"].sum())
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        assert cfg.model.tiny is not None
        build_tiny(cfg.model.tiny).save_pretrained(model_dir)
        tokenizer = _tokenizer(args.vocab, model_dir)
        before = _ours(cfg, model_dir, batch, args.repeats, "before")
        unshared = _ours(cfg, model_dir, batch, args.repeats, "unshared")
        ours = _ours(cfg, model_dir, batch, args.repeats)
        trl = _trl(model_dir, tokenizer, batch, args)
    print(
        f"batch: {batch['prompt_ids'].shape[0]} samples x {args.response_len} response tokens "
        f"({'ragged, ' if args.ragged else ''}{tokens} in all), "
        f"Llama hidden {args.hidden} x {args.layers} layers, vocab {args.vocab}, 1 thread"
    )
    print(f"ours before (padding mask): {tokens / before:8.0f} tokens/s ({before * 1e3:.1f} ms)")
    print(f"ours, every row in full:   {tokens / unshared:8.0f} tokens/s ({unshared * 1e3:.1f} ms)")
    print(f"ours (train_step):          {tokens / ours:8.0f} tokens/s ({ours * 1e3:.1f} ms)")
    print(f"ratio ours / ours before: {before / ours:.2f}x")
    print(f"ratio ours / ours with every row in full (shared prompts): {unshared / ours:.2f}x")
    print(f"TRL 1.16 _compute_loss:    {tokens / trl:8.0f} tokens/s ({trl * 1e3:.1f} ms)")
    print(f"ratio ours / TRL: {trl / ours:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
