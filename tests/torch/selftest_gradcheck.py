"""selftest_gradcheck.py: the oracle's gradient check (used by selftest.py's test_gradcheck): the loss's
gradient against central differences for every parameter column by column, the perturbed forwards
batched with functorch.vmap, and torch's own gradcheck in fast mode on the oracle's loss."""
from selftest_common import *  # noqa: F401,F403


def column_fd_check(m, ids, labels, kw, eps=1e-6, rtol=1e-5, atol=1e-7, chunk=1024):
    """Every parameter column by column, as torch.autograd.gradcheck's full mode does (central
    differences with the same eps, the same allclose rule against autograd's gradient), with the
    perturbed forwards batched by functorch.vmap: 20-25x faster than one Python forward per column.
    The loss is the mean cross-entropy over the labelled tokens written out (vmap has no
    ignore_index); the oracle's own F.cross_entropy is covered by torch's gradcheck beside it.
    Returns (ok, detail)."""
    from functorch import vmap
    names = list(m.params)
    shapes = [p.shape for p in m.params.values()]
    sizes = [p.numel() for p in m.params.values()]
    flat = torch.cat([p.detach().reshape(-1) for p in m.params.values()])
    lab = torch.as_tensor(labels).long().reshape(-1)
    keep = (lab != nt.IGNORE_INDEX).to(torch.float64)

    def f(x):
        params = {n: t.reshape(sh) for n, t, sh in zip(names, torch.split(x, sizes), shapes)}
        logits = nt.forward_params(m.config, params, ids, None, **kw)[1]
        logp = torch.log_softmax(logits.reshape(lab.numel(), -1), dim=-1)
        return -(logp.gather(1, lab.clamp(min=0)[:, None])[:, 0] * keep).sum() / keep.sum()

    n = flat.numel()
    numerical = torch.empty(n, dtype=torch.float64)
    batched = vmap(f)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        step = torch.zeros(b - a, n, dtype=torch.float64)
        step[torch.arange(b - a), torch.arange(a, b)] = eps
        numerical[a:b] = (batched(flat + step) - batched(flat - step)) / (2 * eps)
    x = flat.clone().requires_grad_(True)
    analytical, = torch.autograd.grad(f(x), x)
    bad = ~torch.isclose(analytical, numerical, rtol=rtol, atol=atol)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        owner = next(nm for nm, lo, hi in zip(names, np.cumsum([0] + sizes[:-1]), np.cumsum(sizes)) if lo <= i < hi)
        return False, (f"{int(bad.sum())} of {n} columns differ; first: {owner} element {i}: autograd "
                       f"{analytical[i].item():.9g}, central difference {numerical[i].item():.9g}")
    return True, f"{n} inputs column by column"


def gradcheck_loss(name, cfg, ids, labels, kw, seed):
    """The loss's gradient w.r.t. every parameter, column by column (column_fd_check; torch's own
    full-mode gradcheck when vmap cannot batch the forward), and torch.autograd.gradcheck's fast mode on
    the oracle's own loss (the Jacobian along random directions, F.cross_entropy included)."""
    m = perturbed_model(cfg, seed=seed)
    names = list(m.params)
    params = tuple(p.detach().clone().requires_grad_(True) for p in m.params.values())

    def f(*ts):
        return nt.forward_params(m.config, dict(zip(names, ts)), ids, labels, **kw)[0]

    def gradcheck(fast):
        torch.autograd.gradcheck(f, params, eps=1e-6, atol=1e-7, rtol=1e-5, raise_exception=True, fast_mode=fast)
    try:
        try:
            ok, detail = column_fd_check(m, ids, labels, kw)
        except RuntimeError as e:   # an op vmap does not batch: torch's one-column-at-a-time gradcheck
            gradcheck(fast=False)
            ok, detail = True, f"{sum(t.numel() for t in params)} inputs (torch gradcheck: vmap failed: {str(e)[:80]})"
        gradcheck(fast=True)
        detail += "; torch gradcheck fast mode"
    except Exception as e:   # gradcheck's message names the offending input
        ok, detail = False, str(e).splitlines()[0][:300]
    check(f"gradcheck float64: {name}", ok, detail)
