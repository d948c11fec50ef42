"""Web-page world-model reward: F1 of exact item matches between predicted and true tree diffs.

The model answers with three sections of accessibility-tree lines
(docs/reference.md#web-diffs-and-reward)::

    New items:
    [1273] StaticText 'Vortex Running Shoes'

    Deleted items:
    None

    Updated items:
    [1220] textbox '' focused: True

Items are compared as exact strings per section and micro-averaged over the three sections into
precision, recall and F1.

Reward types (``reward_type``)
------------------------------
``f1`` (the default) is the paper's F1 above, where the ``None`` that marks an unchanged section
counts as an item. Then answering ``None`` everywhere earns partial credit on a transition that
did change (the sections it left empty match: 0.67 for one new item and two empty sections), more
than a tiny model's attempts earn, and GRPO on it collapsed to that answer for every item
(docs/rl.md#measured). ``item_f1`` scores only the tree items: the ``None`` markers are dropped on
both sides, a prediction and a truth that both hold no item score 1, and exactly one of them
empty scores 0. With a tiny model ``item_f1`` still collapsed to ``None``: no item of a changed
page came out exactly right in 8 samples, so those groups carried no gradient and only the
unchanged pages did. ``soft_item_f1`` gives a changed page's near misses credit: within each
section the predicted and true items are paired one to one (Hungarian, maximum summed
similarity), an item pair is worth the token F1 of the two lines (``[37] button 'OK' focused:
True`` against ``[37] button 'OK'``: 0.8), and F1 = 2 x the summed credit / (predicted + true
items); the ``None`` rules are ``item_f1``'s, and exact items score as in ``item_f1``. The
metrics of all three are returned with any of them (``f1``, ``item_f1``, ``soft_item_f1``, ...);
the held-out evaluation reports ``f1``.

Variants
--------
``paper`` reproduces ``web_agent.compute_score`` of the reference code result for result
(``golden_web.jsonl``): headers are case-sensitive and must start the stripped line, text after the
colon on a header line is discarded, repeated headers merge, the end-of-sequence text glued to the
last line breaks that item, and the Hungarian threshold ``p`` degenerates to ``min(|GT|, |Pred|)``
for ``p >= 10000``.

``strict`` (the default) keeps the metric and normalises only what cannot change an item's meaning:

1. End-of-sequence texts (``<｜end▁of▁sentence｜>``, ``<|endoftext|>``, ``<|im_end|>``,
   ``<|eot_id|>``, ``</s>``) are removed, so the last item is not corrupted
   (docs/reference.md#quirks, Q6).
2. Reasoning up to the last ``</think>`` is dropped, so a draft inside the reasoning is not scored.
3. Headers are recognised case-insensitively and with Markdown decoration (``**New items:**``,
   ``### Deleted Items:``): those lines can only be headers.
4. Text after the colon on a header line is an item (``New items: None`` predicts ``None``).
5. A repeated header starts the section afresh (the last answer wins) instead of merging drafts.
6. A Markdown bullet (``-``, ``*``, ``•``) in front of an item that starts with ``[`` is removed,
   and runs of spaces and tabs inside an item collapse to one space: tree lines never start with a
   bullet, and the tree renderer never emits double spaces.

Left alone on purpose: quote style, attribute order, unicode escapes, and the literal ``None``
(the "section unchanged" marker is scored as an item in both variants, as in the paper's data).
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from rlvr_world.rewards.assignment import max_assignment
from rlvr_world.rewards.eos import strip_eos
from rlvr_world.rewards.types import RewardResult, Status, failed

SECTIONS: tuple[str, ...] = ("New items", "Deleted items", "Updated items")
#: The reference's Hungarian costs: 0 for identical strings, this for any other pair.
MISMATCH_COST = 10000.0
#: Longest prediction or ground truth scored, in characters (a 7288-token answer is ~30k chars).
MAX_TEXT_CHARS = 2_000_000

_STRICT_HEADER = re.compile(
    r"^[#>*_\s]*(new|deleted|updated)\s+items\s*[*_]*\s*:\s*[*_]*\s*(.*)$", re.IGNORECASE
)
_BULLET = re.compile(r"^(?:[-*•]|\d+[.)])\s+(?=\[)")
_SPACES = re.compile(r"[ \t]+")

Parsed = dict[str, set[str]]


def parse_sections_paper(text: str) -> tuple[Parsed, bool]:
    """``parse_magento_log`` of the reference (case-sensitive headers, inline text discarded);
    also say whether any header was found."""
    sections: Parsed = {name: set() for name in SECTIONS}
    current: str | None = None
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        header = next((name for name in SECTIONS if line.startswith(name + ":")), None)
        if header is not None:
            current = header
        elif current is not None:
            sections[current].add(line)
    return sections, current is not None


def _normalise_item(line: str) -> str:
    return _SPACES.sub(" ", _BULLET.sub("", line)).strip()


def parse_sections_strict(text: str) -> tuple[Parsed, bool]:
    """Parse with the strict normalisations; also say whether any header was found."""
    text = strip_eos(text).rsplit("</think>", 1)[-1]
    sections: Parsed = {name: set() for name in SECTIONS}
    current: str | None = None
    found = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        match = _STRICT_HEADER.match(line)
        if match is not None:
            current = f"{match.group(1).capitalize()} items"
            sections[current] = set()
            found = True
            line = match.group(2).strip()
            if not line:
                continue
        if current is not None:
            item = _normalise_item(line)
            if item:
                sections[current].add(item)
    return sections, found


def hungarian_matches(truth: set[str], pred: set[str], p: float) -> int:
    """Number of assigned pairs with cost <= p under the reference's 0/10000 cost matrix.

    With unique strings on each side, the optimal assignment pairs every identical string, so for
    ``0 <= p < 10000`` this is the size of the intersection; for ``p >= 10000`` every assigned pair
    counts (``min`` of the sizes), which is the reference's degenerate case (golden web_036).
    """
    if not truth or not pred or p < 0:
        return 0
    if p >= MISMATCH_COST:
        return min(len(truth), len(pred))
    return len(truth & pred)


def f1_of(truth: Parsed, pred: Parsed, p: float) -> dict[str, float]:
    """Micro-averaged precision, recall and F1 over the ground truth's sections."""
    matched = sum(hungarian_matches(truth[s], pred.get(s, set()), p) for s in truth)
    n_truth = sum(len(items) for items in truth.values())
    n_pred = sum(len(pred.get(s, set())) for s in truth)
    precision = matched / n_pred if n_pred else 0.0
    recall = matched / n_truth if n_truth else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {
        "f1": f1,
        "precision": precision,
        "recall": recall,
        "matched_items": float(matched),
        "predicted_items": float(n_pred),
        "target_items": float(n_truth),
    }


#: The marker of a section with nothing in it (scored as an item by ``f1``, not by ``item_f1``).
NONE_ITEM = "None"
REWARD_TYPES: tuple[str, ...] = ("f1", "item_f1", "soft_item_f1")
#: ``soft_item_f1`` matches at most this many items per section on each side (a longer answer's
#: extra items count as unmatched predictions).
MAX_SOFT_ITEMS = 256


def item_f1_of(truth: Parsed, pred: Parsed, p: float) -> float:
    """F1 over tree items only (``None`` markers dropped); 1.0 when neither side has an item."""
    real_truth = {s: items - {NONE_ITEM} for s, items in truth.items()}
    real_pred = {s: items - {NONE_ITEM} for s, items in pred.items()}
    has_truth = any(real_truth.values())
    has_pred = any(real_pred.get(s) for s in real_truth)
    if not has_truth or not has_pred:
        return float(has_truth == has_pred)
    return f1_of(real_truth, real_pred, p)["f1"]


def _item_tokens(item: str) -> Counter[str]:
    return Counter(item.split())


def item_similarity(a: str, b: str) -> float:
    """Token F1 of two items split at whitespace (1.0 for identical items)."""
    return float(_similarities([a], [b])[0, 0])


def _token_counts(counts: list[Counter[str]], vocab: dict[str, int]) -> np.ndarray:
    """Items x vocabulary matrix of token counts."""
    out = np.zeros((len(counts), len(vocab)), dtype=np.int64)
    for i, c in enumerate(counts):
        for w, n in c.items():
            out[i, vocab[w]] = n
    return out


def _similarities(true_items: list[str], pred_items: list[str]) -> np.ndarray:
    """``item_similarity`` of every (true, predicted) pair, as a float64 matrix, without a
    Python loop over the pairs (a 40-item section has 1,600). The shared tokens of two items,
    sum over tokens of min(a, b), is sum over k >= 1 of the tokens both hold at least k times:
    one matrix product per k up to the largest count. Integer counts in float64 are exact, and
    2 * shared / (tokens of both) is the same correctly rounded division as in Python."""
    t_counts = [_item_tokens(t) for t in true_items]
    p_counts = [_item_tokens(q) for q in pred_items]
    vocab = {w: i for i, w in enumerate({w for c in (*t_counts, *p_counts) for w in c})}
    a, b = _token_counts(t_counts, vocab), _token_counts(p_counts, vocab)
    shared = np.zeros((len(true_items), len(pred_items)))
    for k in range(1, int(min(a.max(initial=0), b.max(initial=0))) + 1):
        shared += (a >= k).astype(np.float64) @ (b >= k).astype(np.float64).T
    sizes = (a.sum(axis=1)[:, None] + b.sum(axis=1)[None, :]).astype(np.float64)
    sim = np.zeros_like(shared)
    np.divide(2 * shared, sizes, out=sim, where=shared > 0)
    same = {q: j for j, q in enumerate(pred_items)}
    for i, t in enumerate(true_items):  # identical items: 1.0 (also two empty ones)
        if (j := same.get(t)) is not None:
            sim[i, j] = 1.0
    return sim


def soft_item_f1_of(truth: Parsed, pred: Parsed) -> float:
    """``item_f1`` with partial credit: within each section, predicted and true items are paired
    one to one to maximise the summed ``item_similarity``, and F1 = 2 * that sum / (predicted +
    true items). Exact items give 1 each, so an all-exact answer scores as ``item_f1`` does."""
    real_truth = {s: sorted(items - {NONE_ITEM}) for s, items in truth.items()}
    real_pred = {s: sorted(pred.get(s, set()) - {NONE_ITEM}) for s in real_truth}
    n_truth = sum(len(v) for v in real_truth.values())
    n_pred = sum(len(v) for v in real_pred.values())
    if not n_truth or not n_pred:
        return float(n_truth == n_pred)
    matched = 0.0
    for s, true_items in real_truth.items():
        pred_items = real_pred[s][:MAX_SOFT_ITEMS]
        if not true_items or not pred_items:
            continue
        sim = _similarities(true_items[:MAX_SOFT_ITEMS], pred_items)
        rows, cols = max_assignment(sim)
        matched += float(sim[rows, cols].sum())
    return 2 * matched / (n_truth + n_pred)


def score_web(
    solution_str: str,
    ground_truth: str,
    *,
    variant: str = "strict",
    p: float = 0.0,
    reward_type: str | None = None,
) -> RewardResult:
    """F1 reward of a predicted web-page diff. Never raises.

    ``p`` is the reference's Hungarian threshold (its dispatcher always passes the default 0.0).
    ``reward_type``: ``f1`` (None: the default), ``item_f1`` or ``soft_item_f1`` (module
    docstring).
    """
    if variant not in ("paper", "strict"):
        return failed(
            Status.INVALID_INPUT, f"variant: expected 'paper' or 'strict', got {variant!r}"
        )
    kind = reward_type or "f1"
    if kind not in REWARD_TYPES:
        return failed(
            Status.INVALID_INPUT,
            f"reward_type: unknown {reward_type!r} for web; expected one of "
            f"{', '.join(REWARD_TYPES)} (binary and task_specific are text-game types)",
        )
    if not isinstance(solution_str, str) or not isinstance(ground_truth, str):
        return failed(Status.INVALID_INPUT, "solution_str and ground_truth must be strings")
    if len(ground_truth) > MAX_TEXT_CHARS:
        return failed(Status.INVALID_INPUT, f"ground_truth: longer than {MAX_TEXT_CHARS} chars")
    if len(solution_str) > MAX_TEXT_CHARS:
        return failed(Status.UNPARSEABLE, f"solution_str: longer than {MAX_TEXT_CHARS} chars")
    if variant == "paper":
        truth, _ = parse_sections_paper(ground_truth)
        pred, pred_found = parse_sections_paper(solution_str)
    else:
        truth, truth_found = parse_sections_strict(ground_truth)
        if not truth_found:
            return failed(
                Status.INVALID_INPUT,
                "ground_truth: no 'New items:', 'Deleted items:' or 'Updated items:' section",
            )
        pred, pred_found = parse_sections_strict(solution_str)
    metrics = f1_of(truth, pred, p)
    metrics["item_f1"] = item_f1_of(truth, pred, p) if pred_found else 0.0
    metrics["soft_item_f1"] = soft_item_f1_of(truth, pred) if pred_found else 0.0
    if not pred_found:
        # The reference scores this 0 as well; the status says it was not an answer at all.
        return RewardResult(
            reward=metrics[kind],
            status=Status.UNPARSEABLE,
            metrics=metrics,
            message="solution_str: no recognised section header",
        )
    return RewardResult(reward=metrics[kind], status=Status.OK, metrics=metrics)
