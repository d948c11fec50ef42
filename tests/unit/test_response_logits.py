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

    def loss_and_grads(logits: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        loss = torch.log_softmax(logits, -1)[real].logsumexp(0).sum()
        loss.backward()  # type: ignore[no-untyped-call]
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    ours = response_logits(model, batch, TEMPERATURE)
    before = _with_padding_mask(model, batch)
    torch.testing.assert_close(ours[real], before[real], rtol=1e-6, atol=1e-6)
    loss, grads = loss_and_grads(response_logits(model, batch, TEMPERATURE))
    loss_before, grads_before = loss_and_grads(_with_padding_mask(model, batch))
    torch.testing.assert_close(loss, loss_before, rtol=1e-6, atol=1e-6)
    assert len(grads) == len(grads_before) > 0
    for got, want in zip(grads, grads_before, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
