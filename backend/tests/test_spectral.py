"""QR, symmetric eigen-decomposition, SVD, least squares and pinv on the card (torch_spyre/_spectral*.py),
natively (the CPU fallback forbidden), against CPU torch: LAPACK's conventions where results are unique
(geqrf's reflectors and tau, R's signs), and where they are not (singular vectors, eigenvectors) the
quantities that are: |U|, U @ Vh, reconstruction and orthogonality."""

from __future__ import annotations

import pytest
import torch
import torch_spyre

S = "spyre"
TOL = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture(autouse=True)
def _native():
    torch_spyre.set_cpu_fallback("error")  # every op here must run on the card


def close(got, want, **tol):
    torch.testing.assert_close(got.cpu(), want, **{**TOL, **tol})


def orthonormal_columns(q, atol=2e-6):
    q = q.cpu().double()
    eye = torch.eye(q.shape[-1], dtype=torch.float64).expand(*q.shape[:-2], -1, -1)
    torch.testing.assert_close(q.mT @ q, eye, rtol=0, atol=atol)


@pytest.mark.parametrize("shape", [(5, 5), (6, 3), (3, 6), (2, 3, 4, 4), (1, 1), (0, 3), (2, 0, 4)])
def test_geqrf_and_qr_equal_cpu(shape, cpu_gen):
    x = torch.randn(shape, generator=cpu_gen)
    a, tau = torch.geqrf(x.to(S))
    want_a, want_tau = torch.geqrf(x)
    close(a, want_a)
    close(tau, want_tau)
    for mode in ("reduced", "complete", "r"):
        q, r = torch.linalg.qr(x.to(S), mode=mode)
        want_q, want_r = torch.linalg.qr(x, mode=mode)
        close(q, want_q)
        close(r, want_r)
        assert r.stride() == want_r.stride() or r.numel() <= 1


def test_qr_keeps_lapack_signs_and_reduced_columns(cpu_gen):
    # An upper-triangular input is already reduced: tau = 0 and R keeps its negative diagonal.
    x = torch.randn(4, 4, generator=cpu_gen).triu()
    x[0, 0], x[2, 2] = -abs(x[0, 0]), -abs(x[2, 2])
    a, tau = torch.geqrf(x.to(S))
    close(tau, torch.zeros(4))
    close(a, x)
    # A non-contiguous input (a transposed view) and the input left untouched.
    y = torch.randn(5, 3, generator=cpu_gen)
    dy = y.to(S)
    q, r = torch.linalg.qr(dy.mT)
    want_q, want_r = torch.linalg.qr(y.mT)
    close(q, want_q)
    close(r, want_r)
    close(dy, y, rtol=0, atol=0)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
def test_householder_product_and_ormqr(left, transpose, cpu_gen):
    x = torch.randn(2, 5, 3, generator=cpu_gen)
    a, tau = torch.geqrf(x)
    close(torch.linalg.householder_product(a.to(S), tau.to(S)), torch.linalg.householder_product(a, tau))
    close(torch.linalg.householder_product(a.to(S), tau[:, :2].to(S)), torch.linalg.householder_product(a, tau[:, :2]))
    c = torch.randn(2, 5, 4, generator=cpu_gen) if left else torch.randn(2, 4, 5, generator=cpu_gen)
    out = torch.ormqr(a.to(S), tau.to(S), c.to(S), left=left, transpose=transpose)
    close(out, torch.ormqr(a, tau, c, left=left, transpose=transpose))


def test_ormqr_errors_and_out():
    a, tau, c = torch.zeros(4, 3, device=S), torch.zeros(2, device=S), torch.zeros(4, 2, device=S)
    with pytest.raises(RuntimeError, match=r"tau.shape\[-1\] must be equal to min"):
        torch.ormqr(a, tau, c)
    out = torch.empty(0, device=S)
    assert torch.ormqr(a, torch.zeros(3, device=S), c, out=out) is out and out.shape == (4, 2)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.ormqr(a, torch.zeros(3, device=S), c, out=torch.empty(0, dtype=torch.int64, device=S))


@pytest.mark.parametrize("shape", [(5, 5), (2, 3, 6, 6), (1, 1), (0, 4, 4), (3, 0, 0)])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_against_cpu(shape, uplo, cpu_gen):
    x = torch.randn(shape, generator=cpu_gen)
    w, v = torch.linalg.eigh(x.to(S), UPLO=uplo)
    want_w, want_v = torch.linalg.eigh(x, UPLO=uplo)
    close(w, want_w)
    close(v.abs(), want_v.abs())
    close(torch.linalg.eigvalsh(x.to(S), UPLO=uplo), want_w)
    if x.numel():
        orthonormal_columns(v)
        a = (x.tril() + x.tril(-1).mT) if uplo == "L" else (x.triu() + x.triu(1).mT)
        close(v @ torch.diag_embed(w) @ v.mT, a, atol=1e-5)


@pytest.mark.parametrize("shape", [(5, 5), (6, 4), (4, 6), (2, 3, 5, 2), (1, 1), (3, 1), (0, 3), (3, 0), (2, 0, 0)])
@pytest.mark.parametrize("full", [True, False])
def test_svd_against_cpu(shape, full, cpu_gen):
    x = torch.randn(shape, generator=cpu_gen)
    u, s, vh = torch.linalg.svd(x.to(S), full_matrices=full)
    want_u, want_s, want_vh = torch.linalg.svd(x, full_matrices=full)
    assert (u.shape, s.shape, vh.shape) == (want_u.shape, want_s.shape, want_vh.shape)
    close(s, want_s)
    k = s.shape[-1]
    close(u[..., :k].abs(), want_u[..., :k].abs())
    close(u[..., :k] @ vh[..., :k, :], want_u[..., :k] @ want_vh[..., :k, :])
    if x.numel():
        orthonormal_columns(u)
        orthonormal_columns(vh.mT)
    close(torch.linalg.svdvals(x.to(S)), want_s)


def test_svd_of_rank_deficient_matrices(cpu_gen):
    # rank 2 in 30 x 20: 18 singular values at rounding level, U still orthonormal.
    a = torch.linalg.qr(torch.rand(30, 2, generator=cpu_gen)).Q
    b = torch.linalg.qr(torch.rand(20, 2, generator=cpu_gen)).Q
    x = a @ b.mT
    u, s, vh = torch.linalg.svd(x.to(S))
    close(s[:2], torch.ones(2))
    assert float(s[2:].max()) < 1e-6
    orthonormal_columns(u)
    orthonormal_columns(vh.mT)
    # matrix_rank's rule (its own op compares with float64 tolerances, which the card's pointwise ops
    # take to the CPU): the rank CPU finds.
    tol = s[0] * 30 * torch.finfo(torch.float32).eps
    assert int((s > tol).sum()) == int(torch.linalg.matrix_rank(x)) == 2
    close(torch.linalg.pinv(x.to(S)), torch.linalg.pinv(x))
    zeros = torch.zeros(3, 2, device=S)
    u, s, vh = torch.linalg.svd(zeros)
    close(s, torch.zeros(2), rtol=0, atol=0)
    orthonormal_columns(u)


@pytest.mark.parametrize("scale", [1e30, 1e-30])
def test_svd_and_eigh_of_huge_and_tiny_entries(scale, cpu_gen):
    x = torch.randn(2, 4, 3, generator=cpu_gen)
    x[0] *= scale  # its squares leave fp32's range; the other matrix of the batch does not
    close(torch.linalg.svdvals(x.to(S)).cpu() / torch.linalg.svdvals(x), torch.ones(2, 3))
    y = x[:, :3]
    close(torch.linalg.eigvalsh(y.to(S)).cpu() / torch.linalg.eigvalsh(y), torch.ones(2, 3))


def test_non_finite_inputs_take_the_fallback():
    x = torch.tensor([[1.0, 0.0], [float("nan"), 1.0]], device=S)  # in the lower triangle eigh reads
    for fn in (torch.linalg.svdvals, torch.linalg.eigvalsh):
        with pytest.raises(NotImplementedError, match="CPU fallback is disabled"):
            fn(x)


def test_svd_driver_and_dtypes():
    with pytest.raises(RuntimeError, match="driver="):
        torch.linalg.svd(torch.ones(2, 2, device=S), driver="gesvd")
    with pytest.raises(NotImplementedError, match="CPU fallback is disabled"):  # float64: no card arithmetic
        torch.linalg.svd(torch.ones(2, 2, dtype=torch.float64, device=S))


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss", None])
@pytest.mark.parametrize("shape", [(5, 3), (3, 3), (2, 4, 3), (2, 2, 3)])
def test_lstsq_matches_cpu(driver, shape, cpu_gen):
    a = torch.randn(shape, generator=cpu_gen)
    b = torch.randn(*shape[:-1], 2, generator=cpu_gen)
    da, db = a.to(S), b.to(S)
    got = torch.linalg.lstsq(da, db, driver=driver)
    want = torch.linalg.lstsq(a, b, driver=driver)
    for g, w in zip(got, want, strict=True):
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        close(g, w)
    close(da, a, rtol=0, atol=0)  # the inputs are left as they were
    close(db, b, rtol=0, atol=0)


def test_lstsq_vector_rank_deficient_and_errors(cpu_gen):
    a = torch.randn(5, 3, generator=cpu_gen)
    b = torch.randn(5, generator=cpu_gen)
    for g, w in zip(torch.linalg.lstsq(a.to(S), b.to(S), driver="gelsd"), torch.linalg.lstsq(a, b, driver="gelsd"),
                    strict=True):  # fmt: skip
        close(g, w)
    a[:, 2] = a[:, 1]  # rank 2: the rank-revealing drivers give the minimum-norm solution
    for g, w in zip(torch.linalg.lstsq(a.to(S), b.to(S)), torch.linalg.lstsq(a, b), strict=True):
        close(g, w, atol=1e-4)
    with pytest.raises(torch.linalg.LinAlgError, match="does not have full rank"):
        torch.linalg.lstsq(torch.zeros(3, 3, device=S), torch.ones(3, 1, device=S), driver="gels")
    with pytest.raises(RuntimeError, match="should be one of"):
        torch.linalg.lstsq(a.to(S), b.to(S), driver="nope")


@pytest.mark.parametrize("kwargs", [{}, {"rtol": 1.0}, {"atol": 0.5}, {"hermitian": True}])
def test_pinv_against_cpu(kwargs, cpu_gen):
    x = torch.randn(2, 4, 4, generator=cpu_gen)
    close(torch.linalg.pinv(x.to(S), **kwargs), torch.linalg.pinv(x, **kwargs))
    assert torch.linalg.pinv(torch.zeros(0, 3, device=S)).shape == (3, 0)


def _grads(fn, *inputs):
    """The gradients of fn's outputs (weighted by fixed random tensors) on the CPU and on the card."""
    out = []
    for device in ("cpu", S):
        leaves = [t.detach().to(device).requires_grad_() for t in inputs]
        results = fn(*leaves)
        results = results if isinstance(results, tuple) else (results,)
        gen = torch.Generator().manual_seed(7)
        weights = [torch.randn(r.shape, generator=gen).to(device) for r in results]
        out.append(torch.autograd.grad(results, leaves, weights))
    return out


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (lambda u, s, vh: (u @ vh, s))(*torch.linalg.svd(x, full_matrices=False)),
        lambda x: (lambda w, v: (w, v.abs()))(*torch.linalg.eigh(x)),
        lambda x: torch.linalg.qr(x),
        lambda x: torch.linalg.pinv(x),
        lambda x: torch.linalg.matrix_norm(x, ord="nuc"),
    ],
    ids=["svd", "eigh", "qr", "pinv", "nuc"],
)
def test_backward_against_cpu(fn, cpu_gen):
    x = torch.randn(2, 4, 4, generator=cpu_gen)
    want, got = _grads(fn, x)
    for g, w in zip(got, want, strict=True):
        close(g, w, rtol=1e-3, atol=1e-4)


def test_lstsq_backward(cpu_gen):
    a, b = torch.randn(5, 3, generator=cpu_gen), torch.randn(5, 2, generator=cpu_gen)
    want, got = _grads(lambda a, b: torch.linalg.lstsq(a, b, driver="gelsd").solution, a, b)
    for g, w in zip(got, want, strict=True):
        close(g, w, rtol=1e-3, atol=1e-4)
