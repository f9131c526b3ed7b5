"""The table of torch.nn.functional's kernels composed of native ops: distances, grid sampling,
bags, losses and anti-aliased interpolation, by the ATen overloads they serve.

Each kernel has its ATen overload's signature and runs on spyre tensors: every torch op it calls
dispatches again to the device's own kernels. Only constants that depend on sizes alone (pair index
tables, interpolation matrices read off CPU's op applied to a basis) are built on the host; a few
small control values (lengths, index bounds) are read back for CPU's argument checks. A dtype the
device has no arithmetic for (float64) returns ``NotImplemented`` and takes the CPU fallback under
the user's policy, as do the few corners noted at each kernel.

Backward kernels follow CPU's formula in closed form where its conventions or its rounding matter
(which tied maximum gets the gradient, a hinge at exactly zero, CTC's gradient with respect to the
logits, the 3-d grid sampler's heavily cancelling sum), else they differentiate the forward
composition on the device (2-d grid sampling), so that one lowering serves both directions.

The kernels live by family: ``_nn_distances`` (cdist, pdist), ``_nn_sampling`` (grid sampling,
anti-aliased bilinear interpolation), ``_nn_embedding_bag`` and ``_nn_losses`` (CTC, margin
losses). ``KERNELS`` maps ATen overload names to kernels (merged into ``_decomposed.OWN``).
"""

from __future__ import annotations

from ._composite import same_scalar_type, structured, with_out
from ._nn_distances import _cdist_backward, _cdist_forward, _pdist_backward, _pdist_forward
from ._nn_embedding_bag import (
    _embedding_bag,
    _embedding_bag_backward,
    _embedding_bag_dense_backward,
    _embedding_bag_per_sample_weights_backward,
)
from ._nn_losses import (
    _ctc_loss,
    _ctc_loss_backward,
    _multi_margin_loss_backward,
    _multilabel_margin_loss_backward,
    _multilabel_margin_loss_forward,
)
from ._nn_sampling import (
    _grid_sampler,
    _grid_sampler_backward,
    _upsample_bilinear2d_aa,
    _upsample_bilinear2d_aa_backward,
)

KERNELS = {
    "_cdist_forward": _cdist_forward,
    "_cdist_backward": _cdist_backward,
    "_pdist_forward": _pdist_forward,
    "_pdist_backward": _pdist_backward,
    "grid_sampler_2d": _grid_sampler(2),
    "grid_sampler_3d": _grid_sampler(3),
    "grid_sampler_2d_backward": _grid_sampler_backward(2),
    "grid_sampler_3d_backward": _grid_sampler_backward(3),
    "_embedding_bag": _embedding_bag,
    "_embedding_bag_forward_only": _embedding_bag,
    "_embedding_bag_backward": _embedding_bag_backward,
    "_embedding_bag_dense_backward": _embedding_bag_dense_backward,
    "_embedding_bag_per_sample_weights_backward": _embedding_bag_per_sample_weights_backward,
    "_ctc_loss": _ctc_loss,
    "_ctc_loss.Tensor": _ctc_loss,
    "_ctc_loss_backward": _ctc_loss_backward,
    "_ctc_loss_backward.Tensor": _ctc_loss_backward,
    "multilabel_margin_loss_forward": _multilabel_margin_loss_forward,
    "multilabel_margin_loss_forward.output": with_out(
        _multilabel_margin_loss_forward, ("output", "is_target"), same_scalar_type
    ),
    "multilabel_margin_loss_backward": _multilabel_margin_loss_backward,
    "multilabel_margin_loss_backward.grad_input": with_out(
        _multilabel_margin_loss_backward, ("grad_input",), same_scalar_type
    ),
    "multi_margin_loss_backward": _multi_margin_loss_backward,
    "multi_margin_loss_backward.grad_input": with_out(_multi_margin_loss_backward, ("grad_input",), same_scalar_type),
    "_upsample_bilinear2d_aa": _upsample_bilinear2d_aa,
    "_upsample_bilinear2d_aa.out": with_out(_upsample_bilinear2d_aa, ("out",), structured),
    "_upsample_bilinear2d_aa_backward": _upsample_bilinear2d_aa_backward,
    "_upsample_bilinear2d_aa_backward.grad_input": with_out(
        _upsample_bilinear2d_aa_backward, ("grad_input",), structured
    ),
}
