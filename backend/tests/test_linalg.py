"""Factorisations and solves on the card (torch_spyre/_linalg*.py) against CPU torch: values, LAPACK's
pivots and info codes, result layouts, CPU's errors, out=, and gradients. Every test forbids the
CPU fallback, so an op that is not native fails."""

from __future__ import annotations

import pytest
import torch
import torch_spyre

S = "spyre"


@pytest.fixture(autouse=True)
def _native():
    torch_spyre.set_cpu_fallback("error")


def spd(*shape, gen):
    x = torch.randn(*shape, generator=gen)
    return x @ x.mT + shape[-1] * torch.eye(shape[-1])


def dev(*tensors):
    return [t.to(S) for t in tensors]


def check(got, want, rtol=1e-4, atol=1e-5, strides=True):
    """Results alike in dtype, shape, values and (where CPU's are LAPACK's column-major) strides."""
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.device.type == S
        torch.testing.assert_close(g.cpu(), w, rtol=rtol, atol=atol, equal_nan=True)
        if strides and w.numel() > 1:
            assert g.stride() == w.stride()


@pytest.mark.parametrize("shape", [(5, 5), (2, 4, 4), (2, 1, 3, 3), (1, 1), (0, 0), (0, 3, 3), (3, 0, 0)])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(shape, upper, cpu_gen):
    a = spd(*shape, gen=cpu_gen)
    check(torch.linalg.cholesky_ex(*dev(a), upper=upper), torch.linalg.cholesky_ex(a, upper=upper))
    check(torch.linalg.cholesky(a.to(S).mT, upper=upper), torch.linalg.cholesky(a.mT, upper=upper))  # non-contiguous
    low = torch.linalg.cholesky(a, upper=upper)
    check(torch.cholesky_inverse(*dev(low), upper=upper), torch.cholesky_inverse(low, upper=upper))
    b = torch.randn(*shape[:-1], 2, generator=cpu_gen)
    check(torch.cholesky_solve(*dev(b, low), upper=upper), torch.cholesky_solve(b, low, upper=upper))


def test_cholesky_not_positive_definite(cpu_gen):
    """info is the order of the first leading minor that is not positive definite; L is what LAPACK
    leaves: the columns before it factored, its diagonal entry as computed, the rest as given."""
    a = spd(3, 6, 6, gen=cpu_gen)
    a[0, 3, 3] = -50.0
    a[2] = float("nan")
    check(torch.linalg.cholesky_ex(*dev(a)), torch.linalg.cholesky_ex(a))
    check(torch.linalg.cholesky_ex(*dev(a), upper=True), torch.linalg.cholesky_ex(a, upper=True))
    message = r"\(Batch element 0\): The factorization could not be completed because the input is not positive-def"
    with pytest.raises(torch.linalg.LinAlgError, match=message):
        torch.linalg.cholesky(a.to(S))
    with pytest.raises(torch.linalg.LinAlgError, match="leading minor of order 4 is not positive-definite"):
        torch.linalg.cholesky(a[0].to(S))
    with pytest.raises(RuntimeError, match="must be batches of square matrices"):
        torch.linalg.cholesky(torch.ones(2, 3, device=S))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("unit", [True, False])
def test_solve_triangular(left, upper, unit, cpu_gen):
    a = torch.randn(2, 4, 4, generator=cpu_gen) + 4 * torch.eye(4)
    a = a.triu() if upper else a.tril()
    b = torch.randn(2, 4, 3, generator=cpu_gen)
    b = b if left else b.mT
    want = torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit)
    check(torch.linalg.solve_triangular(*dev(a, b), upper=upper, left=left, unitriangular=unit), want)
    # A broadcast over B's batch, a non-contiguous B
    want = torch.linalg.solve_triangular(a[0], b.mT.contiguous().mT, upper=upper, left=left, unitriangular=unit)
    got = torch.linalg.solve_triangular(a[0].to(S), b.to(S).mT.contiguous().mT, upper=upper, left=left,
                                        unitriangular=unit)  # fmt: skip
    check(got, want)
    c = torch.randn(2, 4, 2, generator=cpu_gen)
    want = torch.triangular_solve(c, a, upper=upper, transpose=left, unitriangular=unit)
    check(torch.triangular_solve(*dev(c, a), upper=upper, transpose=left, unitriangular=unit), want)


@pytest.mark.parametrize("shape", [(5, 5), (5, 3), (3, 5), (2, 3, 4, 4), (1, 1), (0, 2, 2), (2, 0, 3)])
def test_lu(shape, cpu_gen):
    a = torch.randn(*shape, generator=cpu_gen)
    check(torch.linalg.lu_factor_ex(*dev(a)), torch.linalg.lu_factor_ex(a))
    check(torch.linalg.lu(*dev(a)), torch.linalg.lu(a))
    lu, pivots = torch.linalg.lu_factor(a)
    check(torch.lu_unpack(*dev(lu, pivots)), torch.lu_unpack(lu, pivots))


def test_lu_pivots_and_info():
    """Ties go to the first row, as LAPACK's; info is the first zero pivot, pivots 1-based int32."""
    a = torch.tensor([[[1.0, 2, 3], [-1, 0, 1], [1, 2, 3]], [[0, 0, 0], [0, 0, 0], [0, 0, 1]]])
    got = torch.linalg.lu_factor_ex(a.to(S))
    check(got, torch.linalg.lu_factor_ex(a))
    assert got.pivots.dtype == torch.int32 and got.info.tolist() == [3, 1]
    with pytest.raises(RuntimeError, match="LU without pivoting is not implemented"):
        torch.linalg.lu_factor(a.to(S), pivot=False)
    with pytest.raises(RuntimeError, match="pivots passed to lu_unpack must be between 1 and LU.size"):
        torch.lu_unpack(a[0].to(S), torch.tensor([0, 3, 3], dtype=torch.int32, device=S))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [True, False])
def test_lu_solve(left, adjoint, cpu_gen):
    a = torch.randn(2, 4, 4, generator=cpu_gen)
    lu, pivots = torch.linalg.lu_factor(a)
    b = torch.randn(2, 4, 3, generator=cpu_gen)
    b = b if left else b.mT
    want = torch.linalg.lu_solve(lu, pivots, b, left=left, adjoint=adjoint)
    check(torch.linalg.lu_solve(*dev(lu, pivots, b), left=left, adjoint=adjoint), want)
    want = torch.linalg.lu_solve(lu[0], pivots[0], b, left=left, adjoint=adjoint)  # LU broadcast
    check(torch.linalg.lu_solve(*dev(lu[0], pivots[0], b), left=left, adjoint=adjoint), want)


def test_solve_inverse_determinants(cpu_gen):
    a = torch.randn(2, 5, 5, generator=cpu_gen)
    for b in (torch.randn(5, generator=cpu_gen), torch.randn(2, 5, generator=cpu_gen), torch.randn(3, 2, 5, 2)):
        check(torch.linalg.solve_ex(*dev(a, b)), torch.linalg.solve_ex(a, b))
    b = torch.randn(2, 3, 5, generator=cpu_gen)
    check(torch.linalg.solve(*dev(a, b), left=False), torch.linalg.solve(a, b, left=False))
    check(torch.linalg.inv_ex(*dev(a)), torch.linalg.inv_ex(a))
    check(torch.linalg.det(a.to(S)), torch.linalg.det(a))
    check(torch.linalg.det(a.to(S).mT), torch.linalg.det(a.mT))
    check(torch.ops.aten._linalg_det(*dev(a)), torch.ops.aten._linalg_det(a))  # the LU of A^T, as CPU's
    check(torch.linalg.slogdet(a.to(S)), torch.linalg.slogdet(a))
    check(torch.logdet(a.to(S)), torch.logdet(a))
    check(torch.linalg.matrix_power(a.to(S), -2), torch.linalg.matrix_power(a, -2), rtol=1e-3, atol=1e-4)


def test_singular(cpu_gen):
    a = torch.randn(2, 4, 4, generator=cpu_gen)
    a[1, :, 2] = 0
    assert torch.linalg.inv_ex(a.to(S)).info.tolist() == [0, 3]
    check(torch.linalg.det(a.to(S)), torch.linalg.det(a))
    check(torch.linalg.slogdet(a.to(S)), torch.linalg.slogdet(a))
    with pytest.raises(torch.linalg.LinAlgError, match=r"\(Batch element 1\): The solver failed because the input"):
        torch.linalg.solve(a.to(S), torch.ones(4, device=S))
    with pytest.raises(torch.linalg.LinAlgError, match="The diagonal element 3 is zero"):
        torch.linalg.inv(a[1].to(S))
    with pytest.raises(torch.linalg.LinAlgError, match=r"\(Batch element 1\): The diagonal element 2"):
        torch.cholesky_inverse(torch.tensor([[[1.0, 0], [1, 1]], [[1, 0], [1, 0]]], device=S))


def test_matrix_exp(cpu_gen):
    """Double-float arithmetic: the float32 result is exp rounded once, where CPU's loses digits."""
    a = 9 * (2 * torch.rand(20, 5, 5, generator=cpu_gen) - 1)
    exact = torch.linalg.matrix_exp(a.double())
    got = torch.linalg.matrix_exp(a.to(S)).cpu()
    scale = exact.abs().amax((-2, -1), keepdim=True)
    assert ((got.double() - exact).abs() / scale).max() < 2e-7
    check(torch.linalg.matrix_exp(torch.zeros(0, 3, 3, device=S)), torch.linalg.matrix_exp(torch.zeros(0, 3, 3)))
    check(torch.linalg.matrix_exp(a[0, :1, :1].to(S)), torch.linalg.matrix_exp(a[0, :1, :1]))


def test_ldl(cpu_gen):
    """Bunch-Kaufman pivots as LAPACK's sytrf, 2x2 blocks included, and the solve."""
    x = torch.randn(24, 5, 5, generator=cpu_gen)
    a = x + x.mT  # indefinite: some take 2x2 pivots
    a[0] = torch.tensor([[0.0, 1, 0, 0, 0], [1, 0, 2, 0, 0], [0, 2, 1, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 3]])
    want = torch.linalg.ldl_factor_ex(a)
    assert (want.pivots < 0).any() and want.info[0] == 4
    check(torch.linalg.ldl_factor_ex(*dev(a)), want)
    b = torch.randn(5, 2, generator=cpu_gen)
    ld, pivots = want.LD[1:], want.pivots[1:]
    check(torch.linalg.ldl_solve(*dev(ld, pivots, b)), torch.linalg.ldl_solve(ld, pivots, b), rtol=1e-3, atol=1e-4)


def test_out_variants(cpu_gen):
    a = spd(2, 3, 3, gen=cpu_gen)
    out = torch.empty(0, device=S)
    torch.linalg.solve_triangular(a.to(S), a.to(S), upper=True, out=out)
    check(out, torch.linalg.solve_triangular(a, a, upper=True))
    lu, pivots, info = (torch.empty(0, device=S), torch.empty(0, dtype=torch.int32, device=S),
                        torch.empty(0, dtype=torch.int32, device=S))  # fmt: skip
    torch.linalg.lu_factor_ex(a.to(S), out=(lu, pivots, info))
    check((lu, pivots, info), torch.linalg.lu_factor_ex(a))
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float, but got long int instead"):
        torch.linalg.inv_ex(a.to(S), out=(torch.empty(0, dtype=torch.int64, device=S), info))
    with pytest.raises(RuntimeError, match="cholesky_inverse: Expected result to be safely castable from Float"):
        torch.cholesky_inverse(a.to(S), out=torch.empty(0, dtype=torch.int64, device=S))


def test_float64_falls_back():
    with pytest.raises(NotImplementedError, match="CPU fallback is disabled"):
        torch.linalg.cholesky(torch.eye(2, dtype=torch.float64, device=S))


def test_backward(cpu_gen):
    """Every op the derivative formulas call runs on the card too."""
    a = torch.randn(2, 4, 4, generator=cpu_gen)
    p = spd(2, 4, 4, gen=cpu_gen)
    b = torch.randn(2, 4, 3, generator=cpu_gen)
    fns = [
        lambda a, p, b: torch.linalg.cholesky(p),
        lambda a, p, b: torch.linalg.solve(a, b),
        lambda a, p, b: torch.linalg.solve_triangular(a.triu() + 4 * torch.eye(4, device=a.device), b, upper=True),
        lambda a, p, b: torch.linalg.det(a),
        lambda a, p, b: torch.linalg.slogdet(a).logabsdet,
        lambda a, p, b: torch.linalg.inv(a),
        lambda a, p, b: torch.linalg.lu_factor(a).LU,
        lambda a, p, b: torch.linalg.lu(a).U,
        lambda a, p, b: torch.cholesky_solve(b, torch.linalg.cholesky(p)),
        lambda a, p, b: torch.linalg.matrix_exp(a / 4),
    ]
    for fn in fns:
        want = torch.autograd.grad(fn(*[t.requires_grad_() for t in (a, p, b)]).sum(), (a, p, b), allow_unused=True)
        leaves = [t.detach().to(S).requires_grad_() for t in (a, p, b)]
        got = torch.autograd.grad(fn(*leaves).sum(), leaves, allow_unused=True)
        for g, w in zip(got, want, strict=True):
            assert (g is None) == (w is None)
            if w is not None:
                torch.testing.assert_close(g.cpu(), w, rtol=1e-3, atol=1e-4)
