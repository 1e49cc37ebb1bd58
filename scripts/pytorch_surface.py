"""Counts which of a fixed list of everyday PyTorch names alk has: Tensor methods and
top-level functions (issue 42's before/after counts come from this, not from a guess).

    PYTHONPATH=build/python python3 scripts/pytorch_surface.py [--missing]

The lists are fixed on purpose: adding a name changes the denominator, so edit them only
with a note. A name counts as present when `hasattr` finds it; whether it behaves like
PyTorch's is python/tests/test_pytorch_conformance.py's job.
"""
import sys

TENSOR_METHODS = """
abs add add_ addmm all allclose amax amin any argmax argmin argsort backward bmm bool chunk clamp clamp_
clone contiguous copy_ cos cpu cumsum detach device dim div div_ double dtype eq exp expand expand_as
fill_ flatten flip float gather ge grad gt half int isnan item le log log_softmax long lt masked_fill
masked_fill_ matmul max mean min mm mul mul_ ne neg norm numel numpy permute pow prod relu repeat
requires_grad requires_grad_ reshape round scatter scatter_add sigmoid sin size softmax sort split sqrt
square squeeze std sub sub_ sum t tanh to tolist topk transpose type_as unbind unsqueeze var view
view_as where zero_ retain_grad register_hook
""".split()

FUNCTIONS = """
abs add all allclose any arange argmax argmin argsort bmm cat chunk clamp cos cumsum diag div einsum
empty eq exp eye flatten flip float32 from_numpy full full_like gather ge gt isnan linspace load log
logsumexp lt manual_seed matmul max maximum mean min minimum mm mul multinomial ne no_grad enable_grad
set_grad_enabled norm normal ones ones_like outer permute pow prod rand rand_like randint randn
randn_like randperm relu reshape save scatter sigmoid sin softmax sort split sqrt square squeeze stack
std sub sum tanh tensor topk transpose tril triu unbind unsqueeze var where zeros zeros_like
is_tensor numel
""".split()


def count(module):
    tensor = module.Tensor
    has_m = [n for n in TENSOR_METHODS if hasattr(tensor, n)]
    has_f = [n for n in FUNCTIONS if hasattr(module, n)]
    return has_m, has_f


def main():
    import alk
    has_m, has_f = count(alk)
    print(f"Tensor methods: {len(has_m)} of {len(TENSOR_METHODS)}")
    print(f"functions: {len(has_f)} of {len(FUNCTIONS)}")
    if "--missing" in sys.argv:
        print("missing methods:", " ".join(n for n in TENSOR_METHODS if n not in has_m))
        print("missing functions:", " ".join(n for n in FUNCTIONS if n not in has_f))


if __name__ == "__main__":
    main()
