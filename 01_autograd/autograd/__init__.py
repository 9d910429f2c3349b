# GENERATED from solutions/autograd/__init__.py by `course stubs --write`.
# Nothing to write here: given code of stage 01 (01_autograd/01_autograd.ipynb).
"""Stage 01: a reverse-mode autodiff engine on NumPy arrays, and an MLP trained with it.

The files, in exercise order (the lesson is 01_autograd.ipynb):

    backward.py    topological_order, Tensor.backward                      1.1
    arithmetic.py  + - * / ** and -x with broadcasting; _unbroadcast        1.2
    reductions.py  sum, mean, max                                          1.3
    matmul.py      @, 2-D and batched                                      1.4
    shapes.py      reshape, transpose, T, indexing                         1.5
    nonlinear.py   exp, log, tanh, relu, sigmoid                           1.6
    losses.py      softmax, log_softmax, cross_entropy                     1.7
    layers.py      Linear, MLP                                             1.8
    optim.py       SGD                                                     1.8
    tensor.py      Tensor (built from the mixins above), from_op, no_grad  given
    module.py      Module: parameters(), zero_grad()                       given
    data.py        make_spirals                                            given
    demo.py        demo(): the engine next to PyTorch (`course demo`)      given

The one import cycle of solutions/ (the course's import-cycle test allows it, and only it):
`Tensor` is one class, as PyTorch's is (`t.exp()`, `a @ b`, `t.backward()`), yet each
exercise is a file of its own, so that a learner writes the arithmetic in arithmetic.py and
nothing else there. tensor.py therefore builds `Tensor` from the mixins of
backward.py, arithmetic.py, reductions.py, matmul.py, shapes.py and nonlinear.py, and each
of those imports `Tensor` back, for its annotations only (`if TYPE_CHECKING:`), never when
it runs: a mixin makes its results with `self.from_op` (or `type(self)`), and declares the
Tensor state it reads at the end of its class. Nothing else in the stage imports in a circle.
"""

from .arithmetic import _apply, _as_operand, _unbroadcast  # noqa: F401
from .backward import _keep_leaf_grad, topological_order  # noqa: F401
from .data import make_spirals  # noqa: F401
from .demo import demo  # noqa: F401
from .layers import MLP, Linear  # noqa: F401
from .losses import _log_softmax_data, _to_tensor, cross_entropy, log_softmax, softmax  # noqa: F401
from .module import Module  # noqa: F401
from .optim import SGD  # noqa: F401
from .reductions import _normalize_axes, _one_axis  # noqa: F401
from .tensor import BackwardFn, Tensor, is_grad_enabled, no_grad  # noqa: F401
