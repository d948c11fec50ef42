"""``trainer.model.response_logits`` runs the policy without an attention mask (right padding
under causal attention): at every response position of a padded batch its logits, and the
gradients of a loss over them, are those of the forward with the padding mask."""

from __future__ import annotations

import torch

from rlvr_world.grpo.groups import TrainSample
from trainer.config import TinyModel
from trainer.model import PackedBatch, build_tiny, pack, response_logits

torch.set_num_threads(1)
TEMPERATURE = 0.7


def _batch() -> PackedBatch:
    gen = torch.Generator().manual_seed(3)

    def ids(k: int) -> tuple[int, ...]:
        return tuple(int(t) for t in torch.randint(3, 60, (k,), generator=gen))

    rows = [(5, 9), (11, 4), (3, 12), (8, 8)]  # (prompt, response) lengths: every row padded
    return pack(
        [TrainSample("g", ids(p), ids(r), (-1.0,) * r, 0.0, 0.5) for p, r in rows],
        torch.device("cpu"),
    )


def _loss_and_grads(
    model: torch.nn.Module, logits: torch.Tensor, real: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A loss over the real positions' log-probs, and every parameter's gradient of it."""
    model.zero_grad(set_to_none=True)
    loss = torch.log_softmax(logits, -1)[real].logsumexp(0).sum()
    loss.backward()  # type: ignore[no-untyped-call]
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _with_padding_mask(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """The formula before: the padding mask to the model, all logits scaled, then gathered."""
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    logits = out.logits[:, :-1, :].float() / TEMPERATURE
    index = batch.gather_index.unsqueeze(-1).expand(-1, -1, logits.shape[-1])
    return torch.gather(logits, 1, index)


def test_logits_and_gradients_equal_the_padding_mask_forward() -> None:
    torch.manual_seed(0)
    model = build_tiny(TinyModel(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2))
    batch = _batch()
    assert int((batch.attention_mask == 0).sum()) > 0  # padding is there to be ignored
    real = batch.response_mask.bool()

    ours = response_logits(model, batch, TEMPERATURE)
    before = _with_padding_mask(model, batch)
    torch.testing.assert_close(ours[real], before[real], rtol=1e-6, atol=1e-6)
    loss, grads = _loss_and_grads(model, response_logits(model, batch, TEMPERATURE), real)
    loss_before, grads_before = _loss_and_grads(model, _with_padding_mask(model, batch), real)
    torch.testing.assert_close(loss, loss_before, rtol=1e-6, atol=1e-6)
    assert len(grads) == len(grads_before) > 0
    for got, want in zip(grads, grads_before, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def _groups(group_sizes: tuple[int, ...], seed: int = 5) -> list[TrainSample]:
    """GRPO-shaped samples: each group's rows share a prompt, responses of their own lengths;
    groups interleaved so shared rows are not adjacent."""
    gen = torch.Generator().manual_seed(seed)

    def ids(k: int) -> tuple[int, ...]:
        return tuple(int(t) for t in torch.randint(3, 60, (k,), generator=gen))

    groups = []
    for g, size in enumerate(group_sizes):
        prompt = ids(6 + 3 * g)
        lengths = torch.randint(1, 10, (size,), generator=gen).tolist() if size > 1 else [1]
        groups.append(
            [TrainSample(f"g{g}", prompt, ids(n), (-1.0,) * n, 0.0, 0.5) for n in lengths]
        )
    return [s for row in zip(*groups, strict=False) for s in row] + [
        s for g in groups for s in g[min(map(len, groups)) :]
    ]


def test_pack_records_shared_prompts_only_where_they_save_work() -> None:
    cpu = torch.device("cpu")
    batch = pack(_groups((4, 4)), cpu)
    assert [len(g.rows) for g in batch.shared] == [4, 4]
    assert sorted(r for g in batch.shared for r in g.rows) == list(range(8))
    assert pack(_groups((4, 4)), cpu, share_prompts=False).shared == ()
    # one row per prompt (the padded batch above): nothing to share, one full forward
    assert _batch().shared == ()


def test_shared_prompt_logits_and_gradients_equal_the_full_forward() -> None:
    """Each group's prompt runs once and its KV cache is repeated for the rows: the logits at
    every trained position, the loss and every parameter's gradient are the full forward's."""
    torch.manual_seed(0)
    model = build_tiny(TinyModel(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2))
    samples = _groups((4, 3, 1, 4))  # a group of one (a one-token response): still right
    shared = pack(samples, torch.device("cpu"))
    full = pack(samples, torch.device("cpu"), share_prompts=False)
    assert len(shared.shared) == 4 and full.shared == ()
    real = full.response_mask.bool()
    assert [s.response_len for s in shared.shared if len(s.rows) == 1] == [1]

    got = response_logits(model, shared, TEMPERATURE)
    want = response_logits(model, full, TEMPERATURE)
    assert got.shape == want.shape
    torch.testing.assert_close(got[real], want[real], rtol=1e-5, atol=1e-5)
    assert torch.isfinite(got).all()
    loss, grads = _loss_and_grads(model, response_logits(model, shared, TEMPERATURE), real)
    loss_full, grads_full = _loss_and_grads(model, response_logits(model, full, TEMPERATURE), real)
    torch.testing.assert_close(loss, loss_full, rtol=1e-5, atol=1e-5)
    assert len(grads) == len(grads_full) > 0
    for a, b in zip(grads, grads_full, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_dropout_in_training_keeps_the_full_forward() -> None:
    """With dropout active, sharing a prompt's forward would share its dropout mask across the
    group: ``response_logits`` then runs every row in full (same values as share_prompts=False
    under the same random state)."""
    model = build_tiny(TinyModel(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2))
    model.model.layers[0].mlp.down_proj = torch.nn.Sequential(  # type: ignore[index]
        model.model.layers[0].mlp.down_proj,
        torch.nn.Dropout(0.5),  # type: ignore[index]
    )
    model.train()
    samples = _groups((3, 3))
    torch.manual_seed(1)
    got = response_logits(model, pack(samples, torch.device("cpu")), TEMPERATURE)
    torch.manual_seed(1)
    want = response_logits(
        model, pack(samples, torch.device("cpu"), share_prompts=False), TEMPERATURE
    )
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_model_without_a_kv_cache_gets_the_full_forward() -> None:
    """Gradient checkpointing turns the KV cache off in training: the rows run in full, with
    the full forward's logits."""
    model = build_tiny(TinyModel(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2))
    model.gradient_checkpointing_enable()
    model.train()
    samples = _groups((3, 3))
    batch = pack(samples, torch.device("cpu"))
    assert batch.shared
    got = response_logits(model, batch, TEMPERATURE)
    want = response_logits(model, pack(samples, torch.device("cpu"), share_prompts=False), 1.0)
    torch.testing.assert_close(got, want / TEMPERATURE, rtol=0, atol=0)
