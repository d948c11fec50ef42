"""Tokens/s of one GRPO training step on CPU: ours (trainer.step.train_step) vs TRL, same batch.

Baseline: TRL 1.16 ``GRPOTrainer._compute_loss`` (its per-token log-probs + GRPO loss, loss_type
"bnpo" = token-mean, beta 0.001 with k3 KL, epsilon 0.2), with the reference log-probs computed by
TRL's own ``_get_per_token_logps_and_entropies`` on its reference model, then backward, grad clip
1.0 and AdamW, i.e. the same work as our step. The TRL trainer is built from a tiny local
tokenizer and model directory (no download); ``current_gradient_accumulation_steps`` is set to 1,
as TRL's training loop would. Both run in this process, one torch thread, best of N repeats.

    python bench/trainer_step.py [--repeats 5] [--hidden 128] [--layers 4]
"""

from __future__ import annotations

import argparse
import tempfile
import time
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
        "completion_mask": torch.ones(b, r, dtype=torch.long),
        "advantages": torch.randn(b, generator=g),
        "old_per_token_logps": -torch.rand(b, r, generator=g) * 5,
    }


def _ours(cfg: Any, model_dir: Path, batch: dict[str, torch.Tensor], repeats: int) -> float:
    from rlvr_world.grpo.groups import TrainSample
    from trainer.model import frozen_copy, load_base, response_logits
    from trainer.step import train_step

    policy = load_base(cfg.model, weights=model_dir)
    ref = frozen_copy(policy)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-6, betas=(0.9, 0.999), weight_decay=0.01)
    samples = [
        TrainSample(
            group_id=str(i // 4),
            prompt_token_ids=tuple(batch["prompt_ids"][i].tolist()),
            token_ids=tuple(batch["completion_ids"][i].tolist()),
            behaviour_logprobs=tuple(batch["old_per_token_logps"][i].tolist()),
            reward=0.0,
            advantage=float(batch["advantages"][i]),
        )
        for i in range(batch["prompt_ids"].shape[0])
    ]
    best = float("inf")
    for _ in range(repeats):
        stats = train_step(
            cfg,
            policy,
            lambda b: response_logits(ref, b, 1.0),
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
        ours = _ours(cfg, model_dir, batch, args.repeats)
        trl = _trl(model_dir, tokenizer, batch, args)
    print(
        f"batch: {batch['prompt_ids'].shape[0]} samples x {args.response_len} response tokens, "
        f"Llama hidden {args.hidden} x {args.layers} layers, vocab {args.vocab}, 1 thread"
    )
    print(f"ours (train_step):          {tokens / ours:8.0f} tokens/s ({ours * 1e3:.1f} ms)")
    print(f"TRL 1.16 _compute_loss:    {tokens / trl:8.0f} tokens/s ({trl * 1e3:.1f} ms)")
    print(f"ratio ours / TRL: {trl / ours:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
