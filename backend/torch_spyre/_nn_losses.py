"""The CTC loss and the multi-label and multi-class margin losses on the device, forward and
backward, composed of native ops.

Their backward kernels follow CPU's formulas in closed form, where its conventions matter: CTC's
gradient with respect to the logits, a hinge at exactly zero. The kernels are registered through
``_nn_ops.KERNELS``.
"""

from __future__ import annotations

import torch

from ._composite import computable, meta

_NEG_INF = float("-inf")


def _ctc_setup(log_probs, targets, input_lengths, target_lengths, blank):
    """CPU's argument checks, and the lengths as device tensors, the extended label
    sequences [B, 2L+1] (blank, l1, blank, l2, ..., blank) and whether each position may be
    reached from two back (CPU's rule: its label unlike the one there, so never a blank)."""
    if isinstance(input_lengths, torch.Tensor):
        input_lengths = input_lengths.tolist()
    if isinstance(target_lengths, torch.Tensor):
        target_lengths = target_lengths.tolist()
    torch.ops.aten._ctc_loss.default(meta(log_probs), meta(targets), input_lengths, target_lengths, blank)
    steps, batch, labels = log_probs.shape
    if not 0 <= blank < labels:
        raise RuntimeError("blank must be in label range")
    if len(input_lengths) != batch:
        raise RuntimeError("input_lengths must be of size batch_size")
    if len(target_lengths) != batch:
        raise RuntimeError("target_lengths must be of size batch_size")
    where = "(while checking arguments for ctc_loss_allocate_outputs)"
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if min(lengths, default=0) < 0:
            raise RuntimeError(f"Expected {name} to have value at least 0, but got value {min(lengths)} {where}")
    if max(input_lengths, default=0) > steps:
        raise RuntimeError(f"Expected input_lengths to have value at most {steps}, but got value "
                           f"{max(input_lengths)} {where}")  # fmt: skip
    longest = max(target_lengths, default=0)
    dev = log_probs.device
    if targets.dim() == 1:
        total = sum(target_lengths)
        if targets.shape[0] < total:
            raise RuntimeError(f"Expected tensor to have size {total} at dimension 0, but got size "
                               f"{targets.shape[0]} for argument #2 'targets' {where}")  # fmt: skip
        starts = [sum(target_lengths[:b]) for b in range(batch)]
        position = torch.tensor(starts).unsqueeze(1) + torch.arange(longest)
        position = position.clamp(max=max(targets.shape[0] - 1, 0)).to(dev)
        empty = torch.zeros(batch, longest, dtype=torch.int64, device=dev)
        padded = targets.long()[position] if targets.numel() else empty
    else:
        if targets.shape[1] < longest:
            raise RuntimeError(f"Expected tensor to have size at least {longest} at dimension 1, but got size "
                               f"{targets.shape[1]} for argument #2 'targets' {where}")  # fmt: skip
        padded = targets[:, :longest].long()
    span = 2 * longest + 1
    extended = torch.full((batch, span), blank, dtype=torch.int64, device=dev)
    if longest:
        extended[:, 1::2] = padded.clamp(0, labels - 1)
    two_back = torch.cat([torch.full((batch, 2), -1, dtype=torch.int64, device=dev), extended[:, :-2]], 1)
    skip = extended != two_back
    return torch.tensor(input_lengths).to(dev), torch.tensor(target_lengths).to(dev), extended, skip


def _lse3(a, b, c):
    """log(e^a + e^b + e^c) elementwise, -inf where all three are (the device's logaddexp keeps
    -inf exactly; its exp of -inf is a tiny positive number, so log-sum-exp through exp is not)."""
    return torch.logaddexp(torch.logaddexp(a, b), c)


def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    """CTC's negative log likelihood per batch element and log alpha [B, T, 2L+1]: the forward
    recursion over time in log space, all batch elements and label positions at once."""
    if not computable(log_probs):
        return NotImplemented
    in_t, tg_t, extended, skip = _ctc_setup(log_probs, targets, input_lengths, target_lengths, blank)
    steps, batch, _ = log_probs.shape
    span = extended.shape[1]
    dev = log_probs.device
    emit = log_probs.gather(2, extended.unsqueeze(0).expand(steps, batch, span))  # [T, B, S]
    # alphas[:, 0] is a virtual step before t = 0 (probability 1 at position 0), so one
    # recursion covers t = 0 and an input of length 0 reads its likelihood from there.
    alphas = torch.full((batch, steps + 1, span), _NEG_INF, device=dev)
    alphas[:, 0, 0] = 0.0
    edge = torch.full((batch, 2), _NEG_INF, device=dev)
    no_skip = torch.where(skip, 0.0, _NEG_INF)
    previous = alphas[:, 0]
    for t in range(steps):
        shifted = torch.cat([edge, previous], 1)
        previous = emit[t] + _lse3(previous, shifted[:, 1:-1], shifted[:, :-2] + no_skip)
        alphas[:, t + 1] = previous
    # The likelihood: the last step's alphas at the final label and the final blank.
    last = alphas.gather(1, in_t.view(batch, 1, 1).expand(batch, 1, span)).squeeze(1)  # [B, S]
    end = (2 * tg_t).unsqueeze(1)
    final = last.gather(1, end).squeeze(1)
    before = torch.where(tg_t > 0, last.gather(1, (end - 1).clamp_min(0)).squeeze(1), _NEG_INF)
    return -torch.logaddexp(final, before), alphas[:, 1:]


def _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                       blank, zero_infinity=False):  # fmt: skip
    """CTC's gradient with respect to log_probs as CPU gives it (the gradient through a log-softmax
    of them: exp(log_probs) minus the label posteriors): the backward recursion (beta) in log
    space, alpha + beta gathered per label by a scatter-add of their exponentials."""
    if not computable(grad, log_probs, neg_log_likelihood, log_alpha):
        return NotImplemented
    in_t, tg_t, extended, skip = _ctc_setup(log_probs, targets, input_lengths, target_lengths, blank)
    steps, batch, labels = log_probs.shape
    span = extended.shape[1]
    dev = log_probs.device
    emit = log_probs.gather(2, extended.unsqueeze(0).expand(steps, batch, span))
    # Positions that may skip forward: the one two ahead allows it (its label unlike this one's).
    ahead_skip = torch.cat([skip[:, 2:], torch.zeros(batch, 2, dtype=torch.bool, device=dev)], 1)
    no_skip = torch.where(ahead_skip, 0.0, _NEG_INF)
    positions = torch.arange(span, device=dev).unsqueeze(0)
    end = (2 * tg_t).unsqueeze(1)
    start = torch.where((positions == end) | ((positions == end - 1) & (tg_t.unsqueeze(1) > 0)), 0.0, _NEG_INF)
    edge = torch.full((batch, 2), _NEG_INF, device=dev)
    last_step = (in_t - 1).unsqueeze(1)
    betas = torch.full((steps, batch, span), _NEG_INF, device=dev)
    following = torch.full((batch, span), _NEG_INF, device=dev)
    for t in range(steps - 1, -1, -1):
        shifted = torch.cat([following, edge], 1)
        rec = _lse3(following, shifted[:, 1:-1], shifted[:, 2:] + no_skip)
        # A batch element's recursion starts at its last step; before that it has no mass.
        following = emit[t] + torch.where(last_step == t, start, torch.where(last_step > t, rec, _NEG_INF))
        betas[t] = following
    nll = neg_log_likelihood
    posterior = torch.exp(log_alpha.permute(1, 0, 2) + betas + nll.view(1, batch, 1) - emit)  # [T, B, S]
    mass = torch.zeros(steps, batch, labels, device=dev)
    mass.scatter_add_(2, extended.unsqueeze(0).expand(steps, batch, span), posterior)
    g = (log_probs.exp() - mass) * grad.view(1, batch, 1)
    live = torch.arange(steps, device=dev).view(steps, 1, 1) < in_t.view(1, batch, 1)
    impossible = torch.isinf(nll).view(1, batch, 1)  # no alignment: CPU's exp(-inf + inf) is NaN
    if zero_infinity:
        live = live & ~impossible
    else:
        g = torch.where(impossible, float("nan"), g)
    return torch.where(live, g, 0.0)


_NONE, _REDUCE_MEAN, _REDUCE_SUM = 0, 1, 2


def _as_rows(x, target, multilabel: bool):
    """x as [N, C] rows and target as [N, C] (multilabel) or [N] (multi-class)."""
    rows = x.reshape(-1, x.shape[-1]) if x.dim() else x.reshape(1, 1)
    return rows, target.reshape(rows.shape[0], -1).long() if multilabel else target.reshape(-1).long()


def _multilabel_terms(x, target):
    """Per sample the hinge terms 1 - x[y_j] + x[i] [N, J, C] and the pairs that count: j a target
    before the first -1, i not a target; and is_target [N, C]."""
    rows, t = _as_rows(x, target, True)
    rows = rows.to(torch.promote_types(rows.dtype, torch.float32))
    c = rows.shape[1]
    valid = (t < 0).long().cumsum(1) == 0
    index = t.clamp(0, c - 1)  # CPU reads out-of-range targets unchecked; here they are clamped
    is_target = torch.zeros_like(rows).scatter_add_(1, index, valid.to(rows.dtype)) > 0
    hinge = (1 - rows.gather(1, index)).unsqueeze(2) + rows.unsqueeze(1)
    counts = valid.unsqueeze(2) & ~is_target.unsqueeze(1)
    return hinge, counts, is_target, c


def multilabel_loss_shape(x, reduction) -> tuple:
    """CPU's shape of multilabel_margin_loss: one loss per sample without reduction (0-dim for one
    sample, where the meta function and torch's decomposition say [1]), else 0-dim."""
    return tuple(x.shape[:-1]) if reduction == _NONE else ()


def _multilabel_margin_loss_forward(x, target, reduction):
    """multilabel_margin_loss on the card: float32, not empty."""
    if not computable(x) or x.numel() == 0:
        return NotImplemented
    return multilabel_margin_loss(x, target, reduction)


def multilabel_margin_loss(x, target, reduction):
    """The loss, per sample the positive hinges over (target, non-target) pairs / C, and is_target,
    of a non-empty x in float32 or float64 (a compile traces it for float64 too, whose ops then
    run where they can: torch's own decomposition gets the values wrong when a target ends
    early)."""
    shapes = torch.ops.aten.multilabel_margin_loss_forward.default(meta(x), meta(target), reduction)
    hinge, counts, is_target, c = _multilabel_terms(x, target)
    per_sample = torch.where(counts & (hinge > 0), hinge, 0.0).sum((1, 2)) / c
    loss = {_NONE: per_sample, _REDUCE_MEAN: per_sample.mean(), _REDUCE_SUM: per_sample.sum()}[reduction]
    return loss.reshape(multilabel_loss_shape(x, reduction)).to(x.dtype), is_target.to(x.dtype).reshape(shapes[1].shape)


def _multilabel_margin_loss_backward(grad, x, target, reduction, is_target):
    """Its gradient: each positive hinge adds 1/C to the non-target and takes it from the target."""
    if not computable(grad, x) or x.numel() == 0 or target.shape != x.shape:
        return NotImplemented  # CPU raises its own shape errors
    hinge, counts, _, c = _multilabel_terms(x, target)
    rows, t = _as_rows(x, target, True)
    n = rows.shape[0]
    scale = 1.0 / (c * n) if reduction == _REDUCE_MEAN else 1.0 / c
    positive = (counts & (hinge > 0)).float() * scale  # [N, J, C]
    g = positive.sum(1)
    g = g.scatter_add(1, t.clamp(0, c - 1), -positive.sum(2))
    g = g * (grad.float().reshape(n, 1) if reduction == _NONE else grad.float())
    return g.reshape(x.shape).to(x.dtype)


def _multi_margin_loss_backward(grad, x, target, p, margin, weight=None, reduction=_REDUCE_MEAN):
    """multi_margin_loss's gradient: each positive margin term margin - x[y] + x[i] (i != y)
    adds its derivative (1, or 2 z for p = 2, times weight[y], over C) to x[i] and takes it from x[y]."""
    if not computable(grad, x, weight):
        return NotImplemented
    if p not in (1, 2):
        raise RuntimeError("only p == 1 and p == 2 supported")
    if x.numel() == 0:
        return NotImplemented
    rows, t = _as_rows(x, target, False)
    rows = rows.float()
    n, c = rows.shape
    if t.numel() != n or (weight is not None and weight.numel() != c):
        return NotImplemented  # CPU raises its own shape errors
    if bool(((t < 0) | (t >= c)).any()):
        raise RuntimeError("target out of range")
    z = margin - rows.gather(1, t.unsqueeze(1)) + rows
    other = torch.arange(c, device=x.device).unsqueeze(0) != t.unsqueeze(1)
    scale = 1.0 / (c * n) if reduction == _REDUCE_MEAN else 1.0 / c
    h = (scale if p == 1 else 2 * scale * z) * torch.ones_like(z)
    if weight is not None:
        h = h * weight.float()[t].unsqueeze(1)
    h = torch.where(other & (z > 0), h, 0.0)
    g = h.scatter_add(1, t.unsqueeze(1), -h.sum(1, keepdim=True))
    g = g * (grad.float().reshape(n, 1) if reduction == _NONE else grad.float())
    return g.reshape(x.shape).to(x.dtype)
