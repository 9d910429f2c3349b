"""Exercise 1.4: batched matmul where the SECOND operand's batch axes broadcast.

`a @ b` with b of shape (1, k, m) or (k, m) against a batch of a: b fed every batch entry,
so its gradient is the sum over them, of b's own shape. Forgetting to sum b's gradient back
(only a's) gives a gradient of the wrong shape, and only these cases show it.
"""

from __future__ import annotations

import numpy as np
import pytest

import course

ag = course.load("autograd")


@pytest.mark.exercise("1.4")
@pytest.mark.parametrize("sa, sb", [
    ((3, 2, 4), (1, 4, 5)),        # b's batch axis has size 1
    ((3, 2, 2, 4), (3, 1, 4, 5)),  # an inner batch axis of b has size 1
    ((2, 3, 2, 4), (1, 4, 5)),     # b has fewer batch axes, and a size-1 one
    ((4, 2, 3), (3, 2)),           # b is one matrix shared by the batch
    ((2, 1, 2, 3), (5, 3, 2)),     # both operands broadcast
])
def test_matmul_second_operand_batch_axes_broadcast(torch_check, sa, sb):
    rng = np.random.default_rng(sum(sa) * 10 + sum(sb))
    torch_check(lambda a, b: a @ b, lambda a, b: a @ b,
                [rng.standard_normal(sa), rng.standard_normal(sb)], seed=len(sa))


@pytest.mark.exercise("1.4")
def test_gradient_of_a_shared_right_operand_sums_over_the_batch():
    a = ag.Tensor(np.ones((3, 2, 2)))
    b = ag.Tensor(np.eye(2)[None], requires_grad=True)  # (1, 2, 2)
    (a @ b).sum().backward()
    assert b.grad.shape == (1, 2, 2), f"b has shape (1, 2, 2), its gradient has shape {b.grad.shape}"
    np.testing.assert_array_equal(b.grad, np.full((1, 2, 2), 6.0))  # 3 batches x 2 rows of ones
