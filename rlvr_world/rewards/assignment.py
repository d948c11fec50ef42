"""The best one-to-one pairing of rows and columns of a score matrix (the assignment problem).

``max_assignment(scores)`` returns the row and column indices of a pairing that maximises
``scores[rows, cols].sum()``: every row is paired when there are no more rows than columns, else
every column. The web reward's ``soft_item_f1`` pairs items with it. Where scipy is installed
it is ``scipy.optimize.linear_sum_assignment`` (C; 1 ms for 256 x 256); where it is not (the
text and web reward image, built without scipy) it is ``hungarian``: the Hungarian algorithm
(Kuhn-Munkres with row and column potentials, the shortest-augmenting-path form), O(n^2 m) for
n <= m with the inner loop over columns in numpy (about 0.1 s for 256 x 256 on one core). Where
scores tie the two may pair differently; the maximum sum is the same
(tests/unit/test_assignment.py checks ``hungarian`` against scipy).
"""

from __future__ import annotations

import numpy as np


def max_assignment(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)`` (int arrays, rows ascending) of a pairing with the largest summed
    ``scores`` (a finite 2-D array): scipy's where installed, else ``hungarian`` (module
    docstring). An empty matrix gives empty arrays; a non-finite entry or a matrix that is not
    2-D raises ``ValueError``."""
    values = _checked(scores)
    if values.size == 0:
        return _empty()
    try:
        from scipy.optimize import linear_sum_assignment
    except ImportError:
        return hungarian(values)
    rows, cols = linear_sum_assignment(values, maximize=True)
    return rows.astype(np.int64), cols.astype(np.int64)


def _empty() -> tuple[np.ndarray, np.ndarray]:
    empty = np.zeros(0, dtype=np.int64)
    return empty, empty


def _checked(scores: np.ndarray) -> np.ndarray:
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 2:  # noqa: PLR2004 (a matrix)
        raise ValueError(f"scores must be a 2-D matrix, got shape {values.shape}")
    if values.size and not np.isfinite(values).all():
        raise ValueError("scores must be finite")
    return values


def hungarian(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``max_assignment`` without scipy: the Hungarian algorithm in numpy (module docstring);
    the same arguments, results and errors."""
    values = _checked(scores)
    if values.size == 0:
        return _empty()
    flipped = values.shape[0] > values.shape[1]
    cost = -(values.T if flipped else values)
    rows, cols = _min_cost_rows_le_cols(cost)
    if flipped:
        rows, cols = cols, rows
    order = np.argsort(rows, kind="stable")
    return rows[order], cols[order]


def _min_cost_rows_le_cols(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost assignment of every row of ``cost`` (n x m, n <= m) to a distinct column.

    Potentials ``u`` (rows) and ``v`` (columns) keep ``cost[i, j] - u[i] - v[j] >= 0``; each row
    in turn is added by a shortest augmenting path over reduced costs. Index 0 of ``v``, ``owner``
    and ``via`` is the virtual column the path starts from (1-based columns, as the classic
    formulation)."""
    n, m = cost.shape
    u = np.zeros(n + 1)
    v = np.zeros(m + 1)
    owner = np.zeros(m + 1, dtype=np.int64)  # owner[j]: the row (1-based) holding column j; 0: none
    via = np.zeros(m + 1, dtype=np.int64)  # the column before j on the shortest path
    for row in range(1, n + 1):
        owner[0] = row
        col = 0
        shortest = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[col] = True
            holder = owner[col]
            free = ~used[1:]
            reduced = cost[holder - 1] - u[holder] - v[1:]
            closer = free & (reduced < shortest[1:])
            shortest[1:][closer] = reduced[closer]
            via[1:][closer] = col
            candidates = np.where(free, shortest[1:], np.inf)
            nxt = int(np.argmin(candidates)) + 1
            delta = candidates[nxt - 1]
            visited = np.nonzero(used)[0]
            u[owner[visited]] += delta
            v[visited] -= delta
            shortest[1:][free] -= delta
            col = nxt
            if owner[col] == 0:
                break
        while col:  # flip the path: each column on it passes to the row before it
            before = via[col]
            owner[col] = owner[before]
            col = before
    taken = np.nonzero(owner[1:])[0]
    return owner[1:][taken] - 1, taken
