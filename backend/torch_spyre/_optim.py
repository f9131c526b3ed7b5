"""The fused Adam and AdamW steps (``torch.optim.Adam/AdamW(fused=True)``) on spyre.

PyTorch offers ``fused=True`` on every device that registers these kernels, and HuggingFace's
Trainer asks for it by default (``optim="adamw_torch_fused"``). PyTorch has no decomposition of
them, so without a spyre kernel every optimizer step went through the CPU fallback: each
parameter, gradient and both moments copied to the host and back.

The step here is written in device ops, one parameter at a time, with the arithmetic of CPU's
fused kernel (aten/src/ATen/native/cpu/FusedAdamKernel.cpp): the gradient unscaled by
``grad_scale`` and written back, then negated under ``maximize``; weight decay added to the
gradient (Adam) or applied to the parameter first (AdamW); the first moment as a lerp towards the
gradient, the second as ``v * beta2 + (1 - beta2) * g * g``; the denominator
``sqrt(v) / sqrt(1 - beta2^step) + eps`` (the running maximum of ``v`` under ``amsgrad``); and
``p - lr / (1 - beta1^step) * m / denom``. Half and bfloat16 tensors compute in float32 and round
once when stored, as CPU's kernel does. A ``found_inf`` of 1 skips the step, as on CPU.
"""

from __future__ import annotations

import math

import torch

_LOW = (torch.float16, torch.bfloat16)


def _fused_adam(decoupled: bool):
    def step(
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *,
        lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None,
    ):  # fmt: skip
        if found_inf is not None and found_inf.item() == 1.0:
            return
        lr = float(lr.item() if isinstance(lr, torch.Tensor) else lr)
        scale = None if grad_scale is None else grad_scale.float()
        # The step counts, read once for all parameters (one wait for the device, not one each).
        steps = torch.stack([s.reshape(()).float() for s in state_steps]).tolist() if state_steps else []
        for i, param in enumerate(params):
            low = param.dtype in _LOW
            work = (lambda t: t.float()) if low else (lambda t: t)  # noqa: E731
            grad = work(grads[i])
            if scale is not None:
                grad = grad / scale
                grads[i].copy_(grad)
            if maximize:
                grad = -grad
            p = work(param).clone() if low else param
            if weight_decay != 0:
                if decoupled:
                    p.mul_(1 - lr * weight_decay)
                else:
                    grad = grad + p * weight_decay
            m, v = work(exp_avgs[i]), work(exp_avg_sqs[i])
            m.lerp_(grad, 1 - beta1)
            v.mul_(beta2).add_(grad * grad * (1 - beta2))
            if amsgrad:
                vmax = torch.maximum(work(max_exp_avg_sqs[i]), v)
                max_exp_avg_sqs[i].copy_(vmax)
                v_used = vmax
            else:
                v_used = v
            t = steps[i]
            denom = v_used.sqrt().div_(math.sqrt(1 - beta2**t)).add_(eps)
            p.sub_(m.mul(lr / (1 - beta1**t)).div_(denom))
            if low:
                exp_avgs[i].copy_(m)
                exp_avg_sqs[i].copy_(v)
                param.copy_(p)

    return step


KERNELS = {
    "_fused_adam_": _fused_adam(decoupled=False),
    "_fused_adam_.tensor_lr": _fused_adam(decoupled=False),
    "_fused_adamw_": _fused_adam(decoupled=True),
    "_fused_adamw_.tensor_lr": _fused_adam(decoupled=True),
}
