"""Independent numpy implementations of the optimizers torch 1.13 lacks,
for psgraph's reference generators (testdata/optim/gen_reference.py,
testdata/sparse/gen_reference.py): FTRL-proximal as TensorFlow computes it
and row-wise adagrad as FBGEMM computes it. Each is written from the
documented update, not from psgraph's templates.
"""
import numpy as np


class Ftrl:
    """FTRL-proximal as TensorFlow computes it, from the documentation of
    tf.keras.optimizers.Ftrl and tf.raw_ops.ApplyFtrlV2 (l2_shrinkage 0),
    McMahan et al. 2013, Algorithm 1 with Keras's beta folded into l2 as
    l2 + beta / (2 lr):
        accum_new = accum + g^2
        linear += g - (accum_new^(-lr_power) - accum^(-lr_power)) / lr * w
        quadratic = accum_new^(-lr_power) / lr + 2 * (l2 + beta / (2 lr))
        w = (sign(linear) * l1 - linear) / quadratic if |linear| > l1 else 0
        accum = accum_new
    On a table only the rows of the (deduplicated) gradient are updated,
    as tf.raw_ops.SparseApplyFtrlV2 does. Computed in float64, the
    parameter rounded to float32 after each step."""

    def __init__(self, shape, lr, lr_power=-0.5, initial_accumulator_value=0.1, l1=0.0, l2=0.0, beta=0.0):
        self.lr, self.lr_power, self.l1 = lr, lr_power, l1
        self.l2_base, self.beta = l2, beta
        self.accum = np.full(shape, initial_accumulator_value, dtype=np.float64)
        self.linear = np.zeros(shape, dtype=np.float64)

    def apply(self, w, g, rows=None, lr=None):
        """w: the float32 parameter (updated in place), g: the gradient
        (float32), of the rows listed in rows or of the whole parameter;
        lr: this step's rate (a schedule's), else the constructor's. Keras
        folds beta into l2 with the step's rate."""
        sel = slice(None) if rows is None else rows
        lr = self.lr if lr is None else lr
        l2 = self.l2_base + self.beta / (2 * lr)
        wv = w[sel].astype(np.float64)
        g = g.astype(np.float64)
        acc, lin = self.accum[sel], self.linear[sel]
        acc_new = acc + g * g
        lin = lin + g - (acc_new ** -self.lr_power - acc ** -self.lr_power) / lr * wv
        quadratic = acc_new ** -self.lr_power / lr + 2 * l2
        new = np.where(np.abs(lin) > self.l1, (np.sign(lin) * self.l1 - lin) / quadratic, 0.0)
        self.accum[sel], self.linear[sel] = acc_new, lin
        w[sel] = new.astype(np.float32)


class RowwiseAdagrad:
    """Row-wise adagrad as FBGEMM's EXACT_ROWWISE_ADAGRAD (TorchRec's
    default for tables) computes it: one accumulator per row,
        state[r] += mean(g[r]^2);  w[r] -= lr * g[r] / (sqrt(state[r]) + eps)
    for the rows of the gradient (untouched rows are unchanged: their g is
    0). On a dense matrix every row is one. Computed in float64, the
    parameter rounded to float32 after each step."""

    def __init__(self, shape, lr, eps=1e-8, weight_decay=0.0):
        self.lr, self.eps, self.wd = lr, eps, weight_decay
        self.state = np.zeros(shape[0], dtype=np.float64)

    def apply(self, w, g, rows=None):
        """weight_decay is FBGEMM's L2 mode: g + weight_decay * w first."""
        rows = np.arange(w.shape[0]) if rows is None else rows
        g = g.astype(np.float64).reshape(len(rows), -1)
        g = g + self.wd * w[rows].astype(np.float64).reshape(len(rows), -1)
        self.state[rows] += (g * g).mean(axis=1)
        step = self.lr * g / (np.sqrt(self.state[rows])[:, None] + self.eps)
        w[rows] = (w[rows].astype(np.float64) - step.reshape(w[rows].shape)).astype(np.float32)
