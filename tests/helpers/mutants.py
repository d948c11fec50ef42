"""Breakages of the GRPO path, for the mutation harness (``scripts/mutants.py``).

Each mutant replaces one real function with a broken version of itself: a wrapper that calls the
real function and breaks its result or its input, never a copy of its code. What each breaks:

* ``zero_advantages``: every advantage (per sample and per token) is 0
  (``rlvr_world.grpo.groups``' ``group_normalized_scores`` and ``token_normalized_scores``);
* ``loss_sign``: the loss the trainer backpropagates has the wrong sign, at the call site
  (``trainer.step.grpo_loss`` as ``train_step`` calls it; ``grpo_loss`` itself is intact);
* ``logprob_shift``: the log-prob of response token t is read from the logits one position later
  (those that predict token t + 1: the missing-shift bug; ``trainer.step.response_logits``);
* ``mask_ones``: the response mask is all ones (forced tokens and padding trained;
  ``trainer.step.pack``);
* ``staleness_off``: the trainer's staleness gate sees every group as fresh
  (``trainer.loop.Trainer._accept`` gets the group stamped with the current step);
* ``no_publish``: the trainer never publishes its weights (``trainer.loop.publish_weights``).

``apply(name, set_attr)`` installs one, with ``pytest.MonkeyPatch.setattr`` in a test process or
plain ``setattr`` in a process of its own. Each wrapper appends one line to the file named by
``RLVR_MUTANT_HITS`` the first time it changes something in a process during a test (the mutant,
the pid and pytest's ``PYTEST_CURRENT_TEST``, which processes started by a test inherit), so the
harness can tell a mutant that was exercised from one that never ran.

Processes started by a test get the mutant through ``python -m tests.helpers.mutants MODULE
ARGS...``: it applies ``$RLVR_MUTANT`` and then runs ``MODULE`` as ``__main__``
(``tests/helpers/mutant_plugin.py`` rewrites the trainer's command line to this). No product code
reads these variables.
"""

from __future__ import annotations

import dataclasses
import json
import os
import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

MUTANT_ENV = "RLVR_MUTANT"
HITS_ENV = "RLVR_MUTANT_HITS"

SetAttr = Callable[[object, str, Any], None]

_hit_once: set[str] = set()


def record_hit(mutant: str, where: str) -> None:
    """Append ``{mutant, where, pid, test}`` to ``$RLVR_MUTANT_HITS`` (once per process, place
    and test)."""
    path = os.environ.get(HITS_ENV)
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    key = f"{mutant}:{where}:{test}"
    if not path or key in _hit_once:
        return
    _hit_once.add(key)
    line = {"mutant": mutant, "where": where, "pid": os.getpid(), "test": test}
    with Path(path).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


def zero_advantages(set_attr: SetAttr) -> None:
    import torch

    from rlvr_world.grpo import groups

    real_sample = groups.group_normalized_scores
    real_token = groups.token_normalized_scores

    def group_normalized_scores(*args: Any, **kwargs: Any) -> torch.Tensor:
        record_hit("zero_advantages", "group_normalized_scores")
        return torch.zeros_like(real_sample(*args, **kwargs))

    def token_normalized_scores(*args: Any, **kwargs: Any) -> torch.Tensor:
        record_hit("zero_advantages", "token_normalized_scores")
        return torch.zeros_like(real_token(*args, **kwargs))

    set_attr(groups, "group_normalized_scores", group_normalized_scores)
    set_attr(groups, "token_normalized_scores", token_normalized_scores)


def loss_sign(set_attr: SetAttr) -> None:
    from trainer import step

    real = step.grpo_loss

    def grpo_loss(*args: Any, **kwargs: Any) -> Any:
        record_hit("loss_sign", "trainer.step.grpo_loss")
        out = real(*args, **kwargs)
        return dataclasses.replace(out, loss=-out.loss)

    set_attr(step, "grpo_loss", grpo_loss)


def logprob_shift(set_attr: SetAttr) -> None:
    import torch

    from trainer import step

    real = step.response_logits

    def response_logits(*args: Any, **kwargs: Any) -> torch.Tensor:
        record_hit("logprob_shift", "trainer.step.response_logits")
        logits = real(*args, **kwargs)
        return torch.cat([logits[:, 1:], logits[:, -1:]], dim=1)

    set_attr(step, "response_logits", response_logits)


def mask_ones(set_attr: SetAttr) -> None:
    import torch

    from trainer import step

    real = step.pack

    def pack(*args: Any, **kwargs: Any) -> Any:
        record_hit("mask_ones", "trainer.step.pack")
        batch = real(*args, **kwargs)
        return dataclasses.replace(batch, response_mask=torch.ones_like(batch.response_mask))

    set_attr(step, "pack", pack)


def staleness_off(set_attr: SetAttr) -> None:
    from trainer.loop import Trainer

    real = Trainer._accept

    def _accept(self: Trainer, group: Any, batch_ids: set[str]) -> bool:
        if self.state.step - group.policy_version > self.cfg.queue.max_staleness:
            record_hit("staleness_off", "trainer.loop.Trainer._accept")
        fresh = group.model_copy(update={"policy_version": self.state.step})
        return real(self, fresh, batch_ids)

    set_attr(Trainer, "_accept", _accept)


def no_publish(set_attr: SetAttr) -> None:
    from trainer import loop

    def publish_weights(*args: Any, **kwargs: Any) -> None:
        record_hit("no_publish", "trainer.loop.publish_weights")

    set_attr(loop, "publish_weights", publish_weights)


MUTANTS: dict[str, Callable[[SetAttr], None]] = {
    "zero_advantages": zero_advantages,
    "loss_sign": loss_sign,
    "logprob_shift": logprob_shift,
    "mask_ones": mask_ones,
    "staleness_off": staleness_off,
    "no_publish": no_publish,
}


def apply(name: str, set_attr: SetAttr = setattr) -> None:
    """Install mutant ``name``; ``KeyError`` naming the known ones for another name."""
    if name not in MUTANTS:
        raise KeyError(f"{MUTANT_ENV}={name!r}: not a mutant; known: {', '.join(MUTANTS)}")
    MUTANTS[name](set_attr)


def active() -> str | None:
    """The mutant ``$RLVR_MUTANT`` names (None when unset or empty)."""
    return os.environ.get(MUTANT_ENV) or None


def main() -> None:
    """``python -m tests.helpers.mutants MODULE ARGS...``: apply ``$RLVR_MUTANT``, run MODULE."""
    if len(sys.argv) < 2:  # noqa: PLR2004 (this program's name and the module's)
        raise SystemExit("usage: python -m tests.helpers.mutants MODULE [ARGS...]")
    name = active()
    if name is not None:
        apply(name)
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
