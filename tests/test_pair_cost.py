"""The sampled estimate of the all-pairs stage's CPU, on blocks with planted costs."""
import numpy as np
import pytest

from saber_lib.signals.cost import cost_model_total, row_scaled_total


def planted_blocks():
    """20 blocks of 100 query rows (the last one 40) of a 1,940-row corpus; evaluations per block
    vary fourfold, as block topic counts do."""
    rows = np.array([100] * 19 + [40], float)
    pairs_ = rows * 1939
    evals = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4], float) * 1e5
    evals[-1] *= 0.4
    return rows, np.column_stack([pairs_, evals])


def test_cost_proportional_to_evaluations_is_recovered_exactly_and_row_scaling_is_not():
    rows, work = planted_blocks()
    cpu = 2e-6 * work[:, 1]
    total = cpu.sum()                                   # 2e-6 x 9.46e6 = 18.92 s
    pick = np.array([1, 3, 5, 19])                      # evaluations 1, 1, 9, 1.6 (x 1e5): below the mean
    assert cost_model_total(work[pick], cpu[pick], work) == pytest.approx(total, rel=1e-9)
    rowwise = row_scaled_total(rows[pick], cpu[pick], rows.sum())
    assert rowwise == pytest.approx(2e-6 * 12.6e5 * 1940 / 340)   # the sample's CPU per row, times all rows
    assert abs(rowwise / total - 1) > 0.2


def test_pairs_plus_evaluations_and_one_warmup_per_worker():
    rows, work = planted_blocks()
    cpu = 1e-7 * work[:, 0] + 3e-6 * work[:, 1]
    # two workers; each one's first block costs 1.5 s more (its heap grows): the full run pays it twice
    full = cpu.sum() + 2 * 1.5
    pick = np.array([0, 2, 6, 11, 14, 17])
    first = np.array([True, True, False, False, False, False])
    sampled = cpu[pick] + 1.5 * first
    assert cost_model_total(work[pick], sampled, work, first=first) == pytest.approx(full, rel=1e-9)
    # scaling the warm-ups with the rest overshoots: 6 of 20 blocks carry two warm-ups
    assert row_scaled_total(rows[pick], sampled, rows.sum()) > 1.1 * full


def test_mismatched_shapes_are_refused():
    _, work = planted_blocks()
    with pytest.raises(ValueError, match="do not agree"):
        cost_model_total(work[:3], [1.0, 2.0], work)
